#!/usr/bin/python3
"""The MTP layer's reference logits for a trained fixture, from the PyTorch forward that
trained it (qwen35.Student): per prompt its token ids (flashspec's tokenizer, BOS included)
and, at every position i but the last, the MTP layer's 8 largest logits for t_{i+2} (from
the main model's normed hidden row at i and the token t_{i+1}); written as JSON for
tests/test_mtp.cpp (tests/reference/README.md).

usage: mtp_reference.py MODEL.gguf OUT.json [--flashspec build/bin/flashspec] [--prompt TEXT ...]
"""
import argparse
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_file  # noqa: E402
import qwen35  # noqa: E402
import train  # noqa: E402

PROMPTS = [
    "Once upon a time, there was a little girl named Lily.",
    "Tom and his dog went to the park. They saw a big tree and",
    "The sun was hot. Mia wanted to swim in the lake, but her mom said",
    "One day, a small bird found a shiny stone.",
]
TOP = 8


def tokens_of(flashspec, model, prompt):
    out = subprocess.run([flashspec, "tokenize", "-m", model, "-p", prompt, "--ids"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--flashspec", default="build/bin/flashspec")
    ap.add_argument("--prompt", action="append", help="default: four story openings")
    a = ap.parse_args()
    torch.set_flush_denormal(True)  # decays of exp(-large) underflow to denormals, far slower on a CPU
    meta, _ = gguf_file.read(a.model)
    arch = dict(meta)["general.architecture"][1]
    student = qwen35.Student(qwen35.Shape(arch), 0)
    train.load_gguf_into(student, a.model)
    student.eval()
    cases = []
    with torch.no_grad():
        for prompt in a.prompt or PROMPTS:
            ids = tokens_of(a.flashspec, a.model, prompt)
            _, mtp, _ = student(torch.tensor([ids]))
            top = []
            for row in mtp[0]:
                v, i = row.topk(TOP)
                top.append([[int(t), round(float(x), 5)] for t, x in zip(i, v)])
            cases.append({"prompt": prompt, "tokens": ids, "mtp_top": top})
    ref = {"model": os.path.basename(a.model), "arch": arch,
           "note": "mtp_top[i]: the MTP layer's 8 largest logits for tokens[i+2], from the main model's "
                   "normed hidden row at i and tokens[i+1] (scripts/training/mtp_reference.py)",
           "cases": cases}
    with open(a.out, "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
