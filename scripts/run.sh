#!/usr/bin/env bash
# The main job: install what is missing, build, and generate with the default fixture
# pair (stories260K target, salty279K draft) using a speculative token tree.
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=${MODELS:-../shared/models}
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target flashspec
build/bin/flashspec generate -m "$MODELS/stories260K.gguf" -d "$MODELS/salty279K.gguf" \
  -p "${PROMPT:-Once upon a time}" -n "${N:-128}" --temp 0 --tree 64 "$@"
