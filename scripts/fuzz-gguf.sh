#!/usr/bin/env bash
# Builds the GGUF reader fuzzer (clang: libFuzzer + ASan + UBSan, only core/ sources) and
# runs it on one core.
#
#   scripts/fuzz-gguf.sh [SECONDS] [extra libFuzzer flags...]     (default 600 s)
#
# Environment: FS_FUZZ_BUILD   build folder          (default <repo>/build-fuzz-gguf)
#              FS_FUZZ_CORPUS  corpus folder, outside the repo (default <repo>/../fuzz-corpus/gguf)
#              FS_SHARED_DIR   fixtures               (default <repo>/../shared)
#              FS_FUZZ_RSS_MB  libFuzzer -rss_limit_mb (default 2048)
# Crashing inputs are written to the corpus folder's sibling "artifacts/".
set -euo pipefail

secs=${1:-600}
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FS_FUZZ_BUILD:-$root/build-fuzz-gguf}
corpus=${FS_FUZZ_CORPUS:-$root/../fuzz-corpus/gguf}
shared=${FS_SHARED_DIR:-$root/../shared}
artifacts="$(dirname "$corpus")/artifacts"

CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S "$root/tests/fuzz" -B "$build" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target gguf_fuzz -j1
fuzzer="$build/bin/gguf_fuzz"

mkdir -p "$corpus" "$artifacts"
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

exec "$fuzzer" -max_total_time="$secs" -rss_limit_mb="${FS_FUZZ_RSS_MB:-2048}" \
  -dict="$root/tests/fuzz/gguf.dict" -artifact_prefix="$artifacts/" -print_final_stats=1 \
  "$@" "$corpus"
