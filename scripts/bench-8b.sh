#!/usr/bin/env bash
# Speculation at a real model shape: a Llama-3.1-8B-shape target streamed from storage,
# drafted by a Llama-3.2-1B-shape model, by the tiny salty279K and by prompt lookup, each
# against the target alone in the same run, through `flashspec bench` (per configuration:
# tok/s, tau, pass time split into draft / verification / storage wait, the policy's
# choices).
#
#   scripts/bench-8b.sh [--cache DIR] [--ram-budget 1G] [--io-bw BW] [--no-direct]
#                       [-n 48] [-r 3] [--max-prompts N] [--out-dir DIR]
#
# The two models are function-exact inflations of the trained stories260K / salty279K
# pair (../shared/tools/gguf_inflate.py; numpy, a few minutes each), made on demand into
# --cache (default $FLASHSPEC_MODEL_CACHE or ~/.cache/flashspec-models, 4.5 GB) and reused.
# --no-direct --io-bw 4.5G emulates fast storage from the page cache on a slow disk.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: $0 [--cache DIR] [--ram-budget 1G] [--io-bw BW] [--no-direct] [-n 48] [-r 3] [--max-prompts N] [--out-dir DIR]" >&2
  exit 2
}
CACHE=${FLASHSPEC_MODEL_CACHE:-$HOME/.cache/flashspec-models}
BUDGET=1G N=48 REPS=3 OUT=bench-8b
EXTRA=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --cache) CACHE=$2; shift 2 ;;
    --ram-budget) BUDGET=$2; shift 2 ;;
    --io-bw) EXTRA+=(--io-bw "$2"); shift 2 ;;
    --no-direct) EXTRA+=(--no-direct); shift ;;
    -n) N=$2; shift 2 ;;
    -r) REPS=$2; shift 2 ;;
    --max-prompts) EXTRA+=(--max-prompts "$2"); shift 2 ;;
    --out-dir) OUT=$2; shift 2 ;;
    *) usage ;;
  esac
done
FLASHSPEC=${FLASHSPEC:-build/bin/flashspec}  # the binary to bench (default: the README build)
[[ -x $FLASHSPEC ]] || { echo "$FLASHSPEC: not built (scripts/run.sh builds it)" >&2; exit 1; }
SHARED=../shared
PY=/usr/bin/python3
$PY -c "import numpy" 2>/dev/null || { echo "numpy: missing (apt-get install python3-numpy)" >&2; exit 1; }

# make NAME SOURCE ARGS...: inflates SOURCE into CACHE/NAME once (written aside, then renamed).
make_model() {
  local out=$CACHE/$1 src=$SHARED/models/$2
  shift 2
  [[ -f $out ]] && return
  mkdir -p "$CACHE"
  echo "making $out (once) ..." >&2
  $PY $SHARED/tools/gguf_inflate.py "$src" "$out.partial" "$@" --ctx 4096 --type q4_0 >&2
  mv "$out.partial" "$out"
}
make_model t8b-q4_0.gguf stories260K.gguf --dim 4096 --ff 14336 --layers 32 --heads 32 --kv-heads 8 --head-dim 128
make_model d1b-q4_0.gguf salty279K.gguf --dim 2048 --ff 8192 --layers 16 --heads 32 --kv-heads 8 --head-dim 64

TARGET=$CACHE/t8b-q4_0.gguf
COMMON=(-m "$TARGET" --stream --ram-budget "$BUDGET" -n "$N" -r "$REPS" --temp 0 --ignore-eos "${EXTRA[@]}")
mkdir -p "$OUT"
# Each drafter with the automatic policy and fixed shapes; every bench run has the target
# alone as its first configuration, the reference of its speedups.
"$FLASHSPEC" bench "${COMMON[@]}" -d "$CACHE/d1b-q4_0.gguf" --chain 2,4 --tree auto,8 --out "$OUT/d1b"
"$FLASHSPEC" bench "${COMMON[@]}" -d "$CACHE/d1b-q4_0.gguf" --lookup --chain none --tree auto --out "$OUT/d1b-lookup"
"$FLASHSPEC" bench "${COMMON[@]}" -d "$SHARED/models/salty279K.gguf" --chain none --tree auto,16 --out "$OUT/salty"
"$FLASHSPEC" bench "${COMMON[@]}" -d lookup --chain none --tree auto --out "$OUT/lookup"
echo "reports: $OUT/{d1b,d1b-lookup,salty,lookup}.{jsonl,csv,svg}" >&2
