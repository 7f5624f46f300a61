#!/usr/bin/env bash
# The main job: install what is missing, build, and generate with the default fixture
# pair (stories260K target, salty279K draft): the target streamed from storage (O_DIRECT
# reads, its layers outside a 1.9 MB budget that holds the resident draft's 1.3 MB, the
# read ring's 377 KB and 261 KB for the activations of the passes --tree auto verifies,
# as the run's budget line says), the token tree sized per pass by
# --tree auto. 5 prompt + 120 generated tokens stay within the
# 128 the target was trained for.
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=${MODELS:-../shared/models}
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target flashspec
build/bin/flashspec generate -m "$MODELS/stories260K.gguf" -d "$MODELS/salty279K.gguf" \
  -p "${PROMPT:-Once upon a time}" -n "${N:-120}" --temp 0 --stream --ram-budget 1.9M --tree auto "$@"
