#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang: libFuzzer + ASan + UBSan, compiling
# only the sources each one runs) and runs one of them on one core.
#
#   scripts/fuzz.sh TARGET [SECONDS] [extra libFuzzer flags...]     (default 600 s)
#   scripts/fuzz.sh build                                           (builds them all)
#
# TARGET: gguf (the GGUF reader), gbnf (GBNF, compiled as the server compiles a grammar),
# regex (JSON Schema's patterns), json_schema (the JSON Schema compiler), jinja (chat
# templates: lexer, parser, interpreter). A clean run (no crash, no input over the time
# limit, no allocation or RSS over the memory limit, no sanitizer report) exits 0; a finding
# exits non-zero with the reproducer written to the artifacts folder. Replay one with
#   $FS_FUZZ_BUILD/bin/TARGET_fuzz FILE          (FS_FUZZ_VERBOSE=1: what the input gave)
#
# Environment: FS_FUZZ_BUILD     build folder                     (default <repo>/build-fuzz)
#              FS_FUZZ_CORPUS    where new inputs are written, outside the repo
#                                (default <repo>/../fuzz-corpus/TARGET); the committed seeds
#                                tests/fuzz/corpus/TARGET are read too, never written
#              FS_FUZZ_ARTIFACTS reproducers of findings   (default <corpus>/../artifacts/TARGET)
#              FS_FUZZ_NO_BUILD  1: run what is built (the test suite builds once, first)
#              FS_FUZZ_JOBS      build jobs                       (default: all cores)
#              FS_FUZZ_CXX       the clang++ to build with        (default clang++)
#              FS_FUZZ_RSS_MB    -rss_limit_mb and -malloc_limit_mb (default 2048)
#              FS_FUZZ_TIMEOUT   -timeout, seconds per input      (default 10)
#              FS_FUZZ_MAX_LEN   -max_len, bytes per input        (default 4096; gguf: libFuzzer's)
#              FS_SHARED_DIR     (gguf) the fixture models seeding the corpus (default <repo>/../shared)
# and, read by the harnesses (tests/fuzz/fuzz_common.h, grammar_walk.h):
#              FS_FUZZ_VERBOSE=1       print what each input gave (replaying a file)
#              FS_FUZZ_LAX_MESSAGES=1  no one-line check on error messages  } to fuzz on past
#              FS_FUZZ_NO_WALK=1       no Matcher walk over compiled grammars } a known finding
# Without clang++ it prints "fuzz.sh: skipped: ..." and exits 0 (the test suite reports the
# test as skipped), except under CI (CI set, not "false"), where it fails.
set -euo pipefail

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
target=$1
shift
case "$target" in
  gguf | gbnf | regex | json_schema | jinja | build) ;;
  *) echo "fuzz.sh: unknown target '$target'" >&2; usage ;;
esac
secs=600
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then secs=$1; shift; fi

root=$(cd "$(dirname "$0")/.." && pwd)
build=${FS_FUZZ_BUILD:-$root/build-fuzz}
cxx=${FS_FUZZ_CXX:-clang++}

if ! command -v "$cxx" >/dev/null 2>&1; then
  if [ -n "${CI:-}" ] && [ "${CI:-}" != false ] && [ "${CI:-}" != 0 ]; then
    echo "fuzz.sh: $cxx not found, and CI is set: the fuzz tests must run here" \
         "(scripts/install-deps.sh installs clang and libclang-rt-14-dev)" >&2
    exit 1
  fi
  echo "fuzz.sh: skipped: $cxx not found (install clang and libclang-rt-14-dev)"
  exit 0
fi

if [ "${FS_FUZZ_NO_BUILD:-0}" != 1 ] || [ "$target" = build ]; then
  # CMAKE_BUILD_TYPE empty: the harnesses' own -g -O1, and asserts on (no NDEBUG).
  cmake -S "$root/tests/fuzz" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE= >/dev/null
  if [ "$target" = build ]; then
    cmake --build "$build" -j"${FS_FUZZ_JOBS:-$(nproc)}"
    for t in gguf gbnf regex json_schema jinja; do
      [ -x "$build/bin/${t}_fuzz" ] || { echo "fuzz.sh: ${t}_fuzz was not built" >&2; exit 1; }
    done
    exit 0
  fi
  cmake --build "$build" --target "${target}_fuzz" -j"${FS_FUZZ_JOBS:-$(nproc)}"
fi
fuzzer="$build/bin/${target}_fuzz"
[ -x "$fuzzer" ] || { echo "fuzz.sh: $fuzzer is not built" >&2; exit 1; }

corpus=${FS_FUZZ_CORPUS:-$root/../fuzz-corpus/$target}
artifacts=${FS_FUZZ_ARTIFACTS:-$(dirname "$corpus")/artifacts/$target}
seeds="$root/tests/fuzz/corpus/$target"
mkdir -p "$corpus" "$artifacts"

flags=(-max_total_time="$secs" -timeout="${FS_FUZZ_TIMEOUT:-10}"
       -rss_limit_mb="${FS_FUZZ_RSS_MB:-2048}" -malloc_limit_mb="${FS_FUZZ_RSS_MB:-2048}"
       -artifact_prefix="$artifacts/" -print_final_stats=1)
[ -f "$root/tests/fuzz/$target.dict" ] && flags+=(-dict="$root/tests/fuzz/$target.dict")
dirs=("$corpus")
[ -d "$seeds" ] && dirs+=("$seeds")

if [ "$target" = gguf ]; then
  shared=${FS_SHARED_DIR:-$root/../shared}
  [ -n "${FS_FUZZ_MAX_LEN:-}" ] && flags+=(-max_len="$FS_FUZZ_MAX_LEN")
  if [ -z "$(ls -A "$corpus")" ]; then
    echo "seeding $corpus"
    # The fixture models' headers (metadata, tensor infos, the start of the data).
    for m in "$shared"/models/*.gguf; do
      [ -f "$m" ] || continue
      b=$(basename "$m" .gguf)
      head -c 65536 "$m" >"$corpus/$b.head"
      # The same with a tensor count of 0: a valid file holding all the metadata.
      cp "$corpus/$b.head" "$corpus/$b.notensors"
      printf '\0\0\0\0\0\0\0\0' | dd of="$corpus/$b.notensors" bs=1 seek=8 conv=notrunc status=none
    done
    # A small complete file: every value type, nested arrays, one tensor of each type.
    if command -v python3 >/dev/null; then
      python3 - "$corpus/small-valid.gguf" <<'PY'
import struct, sys
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
kv = [
  (s('general.architecture') + struct.pack('<I', 8) + s('llama')),
  (s('general.alignment') + struct.pack('<II', 4, 32)),
  (s('llama.block_count') + struct.pack('<II', 4, 1)),
  (s('u8') + struct.pack('<IB', 0, 7)), (s('i8') + struct.pack('<Ib', 1, -7)),
  (s('u16') + struct.pack('<IH', 2, 7)), (s('i16') + struct.pack('<Ih', 3, -7)),
  (s('i32') + struct.pack('<Ii', 5, -7)), (s('f32') + struct.pack('<If', 6, 1e-5)),
  (s('bool') + struct.pack('<IB', 7, 1)), (s('u64') + struct.pack('<IQ', 10, 7)),
  (s('i64') + struct.pack('<Iq', 11, -7)), (s('f64') + struct.pack('<Id', 12, 0.5)),
  (s('tokenizer.ggml.tokens') + struct.pack('<IIQ', 9, 8, 3) + s('<unk>') + s('<s>') + s('</s>')),
  (s('tokenizer.ggml.scores') + struct.pack('<IIQfff', 9, 6, 3, 0, -1, -2)),
  (s('nested') + struct.pack('<IIQ', 9, 9, 2) + struct.pack('<IQBB', 0, 2, 1, 2)
   + struct.pack('<IQ', 4, 0)),
]
# (name, dims, type, bytes)
ts = [('token_embd.weight', [4, 3], 0, 48), ('f16', [4], 1, 8), ('q4_0', [32], 2, 18),
      ('q8_0', [32, 2], 8, 68), ('q4_k', [256], 12, 144), ('q6_k', [256], 14, 210),
      ('bf16', [2], 30, 4)]
infos, off = b'', 0
for name, dims, typ, n in ts:
  infos += s(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims)
  infos += struct.pack('<IQ', typ, off)
  off = (off + n + 31) // 32 * 32
out = b'GGUF' + struct.pack('<IQQ', 3, len(ts), len(kv)) + b''.join(kv) + infos
out += b'\0' * (-len(out) % 32)
data = bytearray(off)
out += bytes(data)
open(sys.argv[1], 'wb').write(out)
PY
    fi
  fi
else
  flags+=(-max_len="${FS_FUZZ_MAX_LEN:-4096}")
fi

echo "fuzz.sh: $target for ${secs} s: $fuzzer ${flags[*]} $* ${dirs[*]}"
exec "$fuzzer" "${flags[@]}" "$@" "${dirs[@]}"
