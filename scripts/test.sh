#!/usr/bin/env bash
# Builds everything and runs the test suite (CPU; CUDA tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
# One test at a time: each already uses every core through its thread pool.
ctest --test-dir build --output-on-failure --timeout 900
