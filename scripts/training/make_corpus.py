#!/usr/bin/python3
"""The trained fixtures' corpus: stories sampled by flashspec itself from the shared trained pair.

usage: make_corpus.py FLASHSPEC_BIN SHARED_MODELS_DIR OUT.npz [--stories N] [--salty N]

Each story is one `flashspec generate` from BOS alone (-p ""), 127 tokens at temperature 1
with every filter off (top-k 0, top-p 1, min-p 0), so the text follows the model's own
distribution; seed s of stories260K.gguf is --seed s, of salty279K.gguf --seed 1000000 + s.
128 tokens is stories260K's training context. Every 20th story of each model (5%) is held
out. The file holds `train` and `heldout` (int32, one 128-token row per story, -1 after an
end of text), `train_source` and `heldout_source` (0 stories260K, 1 salty279K). Deterministic:
the same binary and models give the same file.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

ROW = 128


def sample(binary, model, seed):
    cmd = [binary, "generate", "-m", model, "-p", "", "-n", str(ROW - 1), "--temp", "1", "--top-k", "0",
           "--top-p", "1", "--min-p", "0", "-t", "1", "-s", str(seed), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"make_corpus: {' '.join(cmd)} failed: {out.stderr.strip().splitlines()[-1:]}")
    d = json.loads(out.stdout)
    tokens = d["prompt_tokens"] + d["tokens"]
    row = np.full(ROW, -1, dtype=np.int32)
    row[:len(tokens)] = tokens[:ROW]
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("models")
    ap.add_argument("out")
    ap.add_argument("--stories", type=int, default=20000)
    ap.add_argument("--salty", type=int, default=4000)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    jobs = [(os.path.join(a.models, "stories260K.gguf"), s, 0) for s in range(1, a.stories + 1)]
    jobs += [(os.path.join(a.models, "salty279K.gguf"), 1000000 + s, 1) for s in range(1, a.salty + 1)]
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        rows = list(pool.map(lambda j: sample(a.binary, j[0], j[1]), jobs))
    source = np.array([j[2] for j in jobs], dtype=np.int8)
    index = np.array([s for s in range(a.stories)] + [s for s in range(a.salty)])
    held = index % 20 == 19
    rows = np.stack(rows)
    tmp = a.out + ".tmp.npz"
    np.savez(tmp, train=rows[~held], heldout=rows[held], train_source=source[~held], heldout_source=source[held])
    os.replace(tmp, a.out)
    digest = hashlib.sha256(open(a.out, "rb").read()).hexdigest()
    n = int((rows >= 0).sum())
    print(f"make_corpus: {a.out}: {len(rows)} stories, {n} tokens ({int(held.sum())} stories held out), sha256 {digest}")


if __name__ == "__main__":
    sys.exit(main())
