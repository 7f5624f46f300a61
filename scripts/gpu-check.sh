#!/usr/bin/env bash
# The GPU acceptance run of the CUDA backend, on a machine with an NVIDIA GPU and the
# CUDA toolkit (CI has no GPU: there ctest reports the CUDA tests as skipped). The backend
# has never run on a GPU before this script passes somewhere. In one run:
#   1. builds for this GPU's architecture and runs the CUDA tests (ops and whole models
#      against the CPU backend for every weight and KV type, staged layers against
#      resident ones bit for bit, speculative output against target-only on the GPU),
#      failing the script if any of them fails;
#   2. flashspec-gpubench: device-to-device copy bandwidth, mat-vec GB/s per weight type
#      on 7B shapes as a fraction of it, batched matmul, host->device copy rates;
#   3. each --kv-type end to end: greedy tokens of --backend cuda against the CPU's;
#   4. end to end: a 7B-shape Q4_0 target inflated from the fixture (~3.7 GB, written
#      once to MODEL_DIR) streamed from disk with a VRAM budget below its size and
#      salty279K as draft: target-only vs --tree 32 vs --tree auto in one bench run.
#
#   scripts/gpu-check.sh [MODEL_DIR] [VRAM_BUDGET (default 2G)]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/flashspec-models}
VRAM=${2:-2G}
SHARED=../shared
mkdir -p "$DIR"
LOG=$DIR/cuda-tests.log

cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=native >/dev/null
cmake --build build-gpu -j"$(nproc)"
build-gpu/bin/flashspec_tests -tc='*cuda*,device path*,block format*' -s > "$LOG" 2>&1 || {
  tail -80 "$LOG"
  echo "gpu-check: CUDA tests failed (full log: $LOG)" >&2
  exit 1
}
grep -E 'max \|logit difference\||test cases:|assertions:' "$LOG" || true
if grep -q 'CUDA tests skipped' "$LOG"; then
  echo "gpu-check: the CUDA tests skipped (no usable GPU?)" >&2
  exit 1
fi

build-gpu/bin/flashspec-gpubench --iters 20

STORIES=$SHARED/models/stories260K.gguf
for kv in f16 f32 q8_0; do
  for be in cpu cuda; do
    build-gpu/bin/flashspec generate -m "$STORIES" -p "Once upon a time" -n 64 --temp 0 --ignore-eos \
      --kv-type "$kv" --backend "$be" --json > "$DIR/kv-$kv-$be.json"
  done
  python3 - "$kv" "$DIR/kv-$kv-cpu.json" "$DIR/kv-$kv-cuda.json" <<'PY'
import json, sys
kv, cpu, gpu = sys.argv[1], *(json.load(open(p))["tokens"] for p in sys.argv[2:])
same = next((i for i, (a, b) in enumerate(zip(cpu, gpu)) if a != b), min(len(cpu), len(gpu)))
print(f"--kv-type {kv}: cuda matches the cpu for {same} of {len(cpu)} greedy tokens")
PY
done
BIG=$DIR/7b-q4_0.gguf
[[ -f $BIG ]] || python3 "$SHARED/tools/gguf_inflate.py" "$SHARED/models/stories260K.gguf" "$BIG" \
  --dim 4096 --ff 11008 --layers 32 --type q4_0
build-gpu/bin/flashspec bench -m "$BIG" -d "$SHARED/models/salty279K.gguf" --backend cuda \
  --stream --vram-budget "$VRAM" --chain none --tree 32,auto -n 64 --max-prompts 4 --ignore-eos \
  --out-dir "$DIR/bench"
