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
# pair (flashspec-make-fixtures --inflate --shape llama-8b / llama-1b, on every core: about
# a minute on 2), made on demand into --cache (default $FLASHSPEC_MODEL_CACHE or
# ~/.cache/flashspec-models, 4.5 GB) and reused.
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
MAKE_FIXTURES=${FLASHSPEC_MAKE_FIXTURES:-$(dirname "$FLASHSPEC")/flashspec-make-fixtures}
[[ -x $MAKE_FIXTURES ]] || { echo "$MAKE_FIXTURES: not built (cmake --build build --target flashspec-make-fixtures)" >&2; exit 1; }

# make NAME SOURCE SHAPE: widens SOURCE into CACHE/NAME once (the tool writes a temporary
# file and renames it into place).
make_model() {
  local out=$CACHE/$1
  [[ -f $out ]] && return
  mkdir -p "$CACHE"
  echo "making $out (once) ..." >&2
  "$MAKE_FIXTURES" --inflate "$SHARED/models/$2" --shape "$3" --type q4_0 "$out" >&2
}
make_model llama-8b-q4_0.gguf stories260K.gguf llama-8b
make_model llama-1b-q4_0.gguf salty279K.gguf llama-1b

TARGET=$CACHE/llama-8b-q4_0.gguf
COMMON=(-m "$TARGET" --stream --ram-budget "$BUDGET" -n "$N" -r "$REPS" --temp 0 --ignore-eos "${EXTRA[@]}")
mkdir -p "$OUT"
# Each drafter with the automatic policy and fixed shapes; every bench run has the target
# alone as its first configuration, the reference of its speedups.
"$FLASHSPEC" bench "${COMMON[@]}" -d "$CACHE/llama-1b-q4_0.gguf" --chain 2,4 --tree auto,8 --out "$OUT/d1b"
"$FLASHSPEC" bench "${COMMON[@]}" -d "$CACHE/llama-1b-q4_0.gguf" --lookup --chain none --tree auto --out "$OUT/d1b-lookup"
"$FLASHSPEC" bench "${COMMON[@]}" -d "$SHARED/models/salty279K.gguf" --chain none --tree auto,16 --out "$OUT/salty"
"$FLASHSPEC" bench "${COMMON[@]}" -d lookup --chain none --tree auto --out "$OUT/lookup"
echo "reports: $OUT/{d1b,d1b-lookup,salty,lookup}.{jsonl,csv,svg}" >&2
