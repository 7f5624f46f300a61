#!/usr/bin/env bash
# Builds the GGUF reader fuzzer (clang: libFuzzer + ASan + UBSan, only core/ sources) and
# runs it on one core: scripts/fuzz.sh gguf, in its own build folder.
#
#   scripts/fuzz-gguf.sh [SECONDS] [extra libFuzzer flags...]     (default 600 s)
#
# Environment: FS_FUZZ_BUILD   build folder          (default <repo>/build-fuzz-gguf)
#              FS_FUZZ_CORPUS  corpus folder, outside the repo (default <repo>/../fuzz-corpus/gguf)
#              FS_SHARED_DIR   fixtures               (default <repo>/../shared)
#              FS_FUZZ_RSS_MB  libFuzzer -rss_limit_mb (default 2048)
# and the others of scripts/fuzz.sh. Crashing inputs are written to the corpus folder's
# sibling "artifacts/gguf/".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export FS_FUZZ_BUILD=${FS_FUZZ_BUILD:-$root/build-fuzz-gguf}
export FS_FUZZ_JOBS=${FS_FUZZ_JOBS:-1}
exec "$root/scripts/fuzz.sh" gguf "$@"
