#!/usr/bin/env bash
# The GPU acceptance run of the CUDA backend, on a machine with an NVIDIA GPU and the
# CUDA toolkit (CI has no GPU: there the CUDA tests skip). In one run:
#   1. builds for this GPU's architecture and runs the CUDA tests (ops and whole models
#      against the CPU backend, speculative output against target-only on the GPU);
#   2. flashspec-gpubench: device-to-device copy bandwidth, mat-vec GB/s per weight type
#      on 7B shapes as a fraction of it, batched matmul, host->device copy rates;
#   3. end to end: a 7B-shape Q4_0 target inflated from the fixture (~3.7 GB, written
#      once to MODEL_DIR) streamed from disk with a VRAM budget below its size and
#      salty279K as draft: target-only vs --tree 32 vs --tree auto in one bench run.
#
#   scripts/gpu-check.sh [MODEL_DIR] [VRAM_BUDGET (default 2G)]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/flashspec-models}
VRAM=${2:-2G}
SHARED=../shared

cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=native >/dev/null
cmake --build build-gpu -j"$(nproc)"
build-gpu/bin/flashspec_tests -tc='*cuda*,device path*,block format*' -s 2>&1 | tail -40

build-gpu/bin/flashspec-gpubench --iters 20

mkdir -p "$DIR"
BIG=$DIR/7b-q4_0.gguf
[[ -f $BIG ]] || python3 "$SHARED/tools/gguf_inflate.py" "$SHARED/models/stories260K.gguf" "$BIG" \
  --dim 4096 --ff 11008 --layers 32 --type q4_0
build-gpu/bin/flashspec bench -m "$BIG" -d "$SHARED/models/salty279K.gguf" --backend cuda \
  --stream --vram-budget "$VRAM" --chain none --tree 32,auto -n 64 --max-prompts 4 --ignore-eos \
  --out-dir "$DIR/bench"
