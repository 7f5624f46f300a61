#!/usr/bin/env bash
# Remakes the trained fixtures tests/fixtures/trained-qwen35.gguf and trained-qwen35moe.gguf
# (committed, with their sha256 in tests/fixtures/SHA256SUMS) from the shared trained pair:
#
#   scripts/train-fixtures.sh [WORK_DIR]     (default WORK_DIR: build/training)
#
# 1. WORK_DIR/corpus.npz: 24,000 stories sampled by flashspec itself (20,000 from
#    stories260K.gguf, 4,000 from salty279K.gguf; fixed seeds; 5% held out), ~3.1M tokens
#    (scripts/training/make_corpus.py).
# 2. Each student distilled from stories260K on that corpus with PyTorch on the CPU
#    (scripts/training/train.py; the model in scripts/training/qwen35.py), written as Q8_0
#    GGUF with an MTP layer, then its held-out perplexity and MTP accuracy printed as JSON
#    (also kept in WORK_DIR/trained-*.json).
#
# Needs PyTorch for /usr/bin/python3: Debian's python3-torch with libopenblas0-pthread
# (without OpenBLAS torch falls back to the reference BLAS, ~12x slower); installed here when
# missing (root, or sudo). Not part of the README's two commands: the tests use the
# committed files. The corpus is byte-identical from run to run; training is seeded, but
# torch's CPU kernels may round differently on another machine, so a remade file can differ
# in its last bits from the committed one (its figures within noise).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
shared=${FLASHSPEC_SHARED_DIR:-$root/../shared}
work=${1:-$root/build/training}
mkdir -p "$work" "$root/tests/fixtures"

if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "train-fixtures: installing python3-torch and libopenblas0-pthread" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-torch libopenblas0-pthread >/dev/null
fi

bin=$root/build/bin/flashspec
if [[ ! -x "$bin" ]]; then
  [[ -f "$root/build/CMakeCache.txt" ]] || cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >&2
  cmake --build "$root/build" --target flashspec -j"$(nproc)" >&2
fi

if [[ ! -f "$work/corpus.npz" ]]; then
  /usr/bin/python3 "$root/scripts/training/make_corpus.py" "$bin" "$shared/models" "$work/corpus.npz"
fi
for arch in qwen35 qwen35moe; do
  out=$root/tests/fixtures/trained-$arch.gguf
  /usr/bin/python3 "$root/scripts/training/train.py" --arch "$arch" "$work/corpus.npz" \
    "$shared/models/stories260K.gguf" "$out" --state "$work/trained-$arch.pt" | tee "$work/trained-$arch.log"
  tail -n 1 "$work/trained-$arch.log" > "$work/trained-$arch.json"
done
(cd "$root/tests/fixtures" && sha256sum trained-qwen35.gguf trained-qwen35moe.gguf > SHA256SUMS)
cat "$root/tests/fixtures/SHA256SUMS"
