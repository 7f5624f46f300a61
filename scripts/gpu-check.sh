#!/usr/bin/env bash
# The GPU acceptance run of the CUDA backend, on a machine with an NVIDIA GPU. In one run:
#   1. the CUDA tests (ops against double precision and the CPU backend, block decoding,
#      whole models against the CPU backend for every weight and KV type, staged layers
#      against resident ones bit for bit, speculative output against target-only on the
#      GPU), each group with its own log, every group run even after one fails;
#   2. flashspec-gpubench: device-to-device copy bandwidth, mat-vec GB/s per weight type
#      on 7B shapes as a fraction of it, batched matmul, host->device copy rates, and
#      copies overlapping compute;
#   3. each --kv-type end to end: greedy tokens of --backend cuda against the CPU's;
#   4. end to end: a 7B-shape Q4_0 target inflated from the fixture (~3.7 GB, written
#      once to MODEL_DIR and kept) streamed with a VRAM budget below its size and
#      salty279K drafting: target alone vs --tree auto, greedy, tokens compared.
# Exits non-zero when any step failed; every log is in MODEL_DIR.
#
#   scripts/gpu-check.sh [MODEL_DIR] [VRAM_BUDGET (default 2G)]
#
# Builds into build-gpu for this GPU's architecture, unless FS_BIN names a folder of
# binaries built elsewhere (the GPU machines lent to this project have the CUDA toolkit
# but not the Debian libraries, and nothing can be installed there: build on Debian with
# the default CUDA architectures, which include sm_90, and bring build/bin along).
# Where the inflation is slow (it ran past 6 minutes on a 16-core GPU machine whose
# Python was the image's own), make MODEL_DIR/7b-q4_0.gguf ahead of time.
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/flashspec-models}
VRAM=${2:-2G}
SHARED=${FLASHSPEC_SHARED_DIR:-../shared}
mkdir -p "$DIR"
failed=()

if [[ -n ${FS_BIN:-} ]]; then
  BIN=$FS_BIN
else
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=native >/dev/null &&
    cmake --build build-gpu -j"$(nproc)" || { echo "gpu-check: the build failed" >&2; exit 1; }
  BIN=build-gpu/bin
fi

for group in 'cuda backend*' 'block format*' 'cuda model*' 'device path*'; do
  log=$DIR/tests-${group%%\**}.log
  log=${log// /-}
  "$BIN/flashspec_tests" -tc="$group" -s >"$log" 2>&1 || failed+=("tests '$group' ($log)")
  grep -E 'MESSAGE|test cases:|assertions:' "$log" | sed "s|^|$group: |"
  if grep -q 'CUDA tests skipped' "$log"; then
    echo "gpu-check: the CUDA tests skipped (no usable GPU?)" >&2
    exit 1
  fi
done

"$BIN/flashspec-gpubench" --iters 20 | tee "$DIR/gpubench.jsonl" || failed+=(gpubench)

STORIES=$SHARED/models/stories260K.gguf
for kv in f16 f32 q8_0; do
  for be in cpu cuda; do
    "$BIN/flashspec" generate -m "$STORIES" -p "Once upon a time" -n 64 --temp 0 --ignore-eos \
      --kv-type "$kv" --backend "$be" --json >"$DIR/kv-$kv-$be.json" || failed+=("generate --kv-type $kv --backend $be")
  done
done

BIG=$DIR/7b-q4_0.gguf
if [[ ! -f $BIG ]]; then
  python3 "$SHARED/tools/gguf_inflate.py" "$STORIES" "$BIG.part" --dim 4096 --ff 11008 --layers 32 --type q4_0 &&
    mv "$BIG.part" "$BIG" || failed+=("the 7B-shape file")
fi
P="Once upon a time, there was a little girl named Lily"
common=(-m "$BIG" --backend cuda --stream --vram-budget "$VRAM" -p "$P" -n 64 --temp 0 --ignore-eos --json)
if [[ -f $BIG ]]; then
  "$BIN/flashspec" generate "${common[@]}" >"$DIR/main-alone.json" || failed+=("the main job, target alone")
  "$BIN/flashspec" generate "${common[@]}" -d "$SHARED/models/salty279K.gguf" --tree auto \
    --trace "$DIR/main-auto-trace.json" >"$DIR/main-auto.json" || failed+=("the main job, --tree auto")
fi

python3 - "$DIR" <<'PY' || failed+=("a comparison")
import json, sys, os
d = sys.argv[1]
def load(name):
    with open(os.path.join(d, name)) as f:
        return json.load(f)
ok = True
for kv in ("f16", "f32", "q8_0"):
    cpu, gpu = load(f"kv-{kv}-cpu.json")["tokens"], load(f"kv-{kv}-cuda.json")["tokens"]
    same = next((i for i, (a, b) in enumerate(zip(cpu, gpu)) if a != b), min(len(cpu), len(gpu)))
    print(f"--kv-type {kv}: cuda matches the cpu for {same} of {len(cpu)} greedy tokens")
    ok &= same == len(cpu)
if os.path.exists(os.path.join(d, "main-auto.json")):
    a, b = load("main-alone.json"), load("main-auto.json")
    for name, r in (("target alone", a), ("--tree auto", b)):
        s = r["stats"]
        print(f"{name}: {s['generated'] / s['decode_ms'] * 1e3:.2f} tok/s decode, tau {s['tau']:.2f}, "
              f"I/O busy {s['io_busy']:.2f}, {s['read_gbps']:.2f} GB/s read")
    same = a["tokens"] == b["tokens"]
    print(f"greedy tokens identical: {same}; speedup "
          f"{(b['stats']['generated'] / b['stats']['decode_ms']) / (a['stats']['generated'] / a['stats']['decode_ms']):.2f}x")
    ok &= same
sys.exit(0 if ok else 1)
PY

if ((${#failed[@]})); then
  printf 'gpu-check: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "gpu-check: every step passed (logs in $DIR)"
