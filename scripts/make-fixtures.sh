#!/usr/bin/env bash
# The one script for every fixture model the project makes itself (the families with no
# small real checkpoint in ../shared/models: tiny-qwen35, tiny-qwen35moe, ...):
#
#   scripts/make-fixtures.sh DIR
#       writes DIR/tiny-qwen35.gguf and DIR/tiny-qwen35moe.gguf (byte-identical every run;
#       each written to a temporary name and renamed into place). The tests call it through
#       made_fixture_path() (tests/fixtures.h), into build/fixtures.
#   scripts/make-fixtures.sh --shape qwen35moe-35b-a3b --type q4_0|q8_0 [--layers N] OUT.gguf
#       arguments starting with -- go to the generator unchanged: random weights at a real
#       model's shape, for benchmarks (~20 GB at q4_0; never committed, never made by tests).
#
# The generator is $FS_MAKE_FIXTURES_BIN when set, else build/bin/flashspec-make-fixtures
# (built with cmake when missing). The Qwen3 tokenizer comes from
# $FLASHSPEC_SHARED_DIR/models/tiny-qwen3.gguf (default: ../shared beside the repository).
set -euo pipefail

usage="usage: scripts/make-fixtures.sh DIR | scripts/make-fixtures.sh --shape NAME --type q4_0|q8_0 [--layers N] OUT.gguf"
if [[ $# -ge 1 && ( "$1" == "-h" || "$1" == "--help" ) ]]; then
  echo "$usage"
  exit 0
fi
if [[ $# -lt 1 ]]; then
  echo "$usage" >&2
  exit 1
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
shared=${FLASHSPEC_SHARED_DIR:-$root/../shared}
export FLASHSPEC_SHARED_DIR=$shared

bin=${FS_MAKE_FIXTURES_BIN:-}
if [[ -z "$bin" ]]; then
  bin=$root/build/bin/flashspec-make-fixtures
  if [[ ! -x "$bin" ]]; then
    echo "make-fixtures: building flashspec-make-fixtures" >&2
    if [[ ! -f "$root/build/CMakeCache.txt" ]]; then
      cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >&2
    fi
    cmake --build "$root/build" --target flashspec-make-fixtures -j"$(nproc)" >&2
  fi
fi
if [[ ! -x "$bin" ]]; then
  echo "make-fixtures: no generator at $bin" >&2
  exit 1
fi

if [[ "$1" == --* ]]; then
  exec "$bin" "$@"
fi
if [[ $# -ne 1 ]]; then
  echo "$usage" >&2
  exit 1
fi
exec "$bin" "$shared/models" "$1"
