#!/usr/bin/env bash
# Read rate of the weight stream (flashspec-iobench) next to fio reading the same file
# with O_DIRECT, io_uring, the same request size and queue depth, in the same run;
# then the bandwidth cap (--io-bw 1G) measured. Creates no files.
#
#   scripts/bench-io.sh MODEL.gguf [--bs 8M] [--depth 4] [--passes 3] [--rounds 5]
#
# --bs takes bytes or a binary k/m suffix (1M = 1 MiB, as fio reads it). Each round runs
# fio then the stream over the same bytes (fio --loops = passes); cloud and virtual disks
# vary a lot from second to second, so rounds alternate and medians are compared.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: $0 MODEL.gguf [--bs 8M] [--depth 4] [--passes 3] [--rounds 5]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
MODEL=$1; shift
BS=8M DEPTH=4 PASSES=3 ROUNDS=5
while [[ $# -gt 0 ]]; do
  case $1 in
    --bs) BS=$2; shift 2 ;;
    --depth) DEPTH=$2; shift 2 ;;
    --passes) PASSES=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) usage ;;
  esac
done
[[ -f $MODEL ]] || { echo "$MODEL: no such file" >&2; exit 1; }
IOBENCH=build/bin/flashspec-iobench
[[ -x $IOBENCH ]] || { echo "$IOBENCH: not built (cmake --build build)" >&2; exit 1; }
command -v fio >/dev/null || { echo "fio: not installed (apt-get install fio)" >&2; exit 1; }
PY=/usr/bin/python3

case $BS in
  *[kK]) BS_BYTES=$(( ${BS%[kK]} * 1024 )) ;;
  *[mM]) BS_BYTES=$(( ${BS%[mM]} * 1024 * 1024 )) ;;
  *) BS_BYTES=$BS ;;
esac
SIZE=$(stat -c %s "$MODEL")
jget() { $PY -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

echo "model: $MODEL ($SIZE bytes), request $BS_BYTES bytes, queue depth $DEPTH, $PASSES passes per run, $ROUNDS rounds"
if sync && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then
  echo "page cache: dropped before the runs (O_DIRECT bypasses it anyway)"
else
  echo "page cache: cannot drop here (O_DIRECT bypasses it anyway)"
fi

# fio twice per round: its defaults (one submission per I/O), and batched like the stream's
# reader (up to DEPTH submissions per io_uring_enter, every available completion reaped).
FIO_BATCH=(--iodepth_batch_submit="$DEPTH" --iodepth_batch_complete_min=1 --iodepth_batch_complete_max="$DEPTH")
fio_rate() {
  fio --name=bench-io --filename="$MODEL" --readonly --direct=1 --ioengine=io_uring --rw=read \
      --bs="$BS_BYTES" --iodepth="$DEPTH" --size="$SIZE" --loops="$PASSES" "$@" --output-format=json 2>/dev/null |
    jget "d['jobs'][0]['read']['bw_bytes'] / 1e9"
}
fio_rates=() fiob_rates=() stream_rates=()
for r in $(seq 1 "$ROUNDS"); do
  f=$(fio_rate)
  fb=$(fio_rate "${FIO_BATCH[@]}")
  s=$("$IOBENCH" "$MODEL" --passes "$PASSES" --io-depth "$DEPTH" --request-size "$BS_BYTES" --json | jget "d['gbps']")
  fio_rates+=("$f"); fiob_rates+=("$fb"); stream_rates+=("$s")
  $PY -c "print('round $r: fio %.3f GB/s, fio batched %.3f GB/s, stream %.3f GB/s' % ($f, $fb, $s))"
done

$PY - "${fio_rates[*]}" "${fiob_rates[*]}" "${stream_rates[*]}" <<'EOF'
import statistics, sys
f, fb, s = ([float(x) for x in a.split()] for a in sys.argv[1:4])
mf, mfb, ms = statistics.median(f), statistics.median(fb), statistics.median(s)
print(f"median: fio {mf:.3f} GB/s, fio batched {mfb:.3f} GB/s, stream {ms:.3f} GB/s")
print(f"stream/fio = {ms / mf:.2f}, stream/fio batched = {ms / mfb:.2f} (goal >= 0.90)")
EOF

echo "bandwidth cap --io-bw 1G (1.000 GB/s):"
capped() {
  "$IOBENCH" "$MODEL" --passes "$PASSES" --io-depth "$DEPTH" --request-size "$BS_BYTES" "$@" --json |
    jget "'  %-32s %.3f GB/s over %.2f s (%+.1f%% from 1 GB/s)' % ('$*', d['gbps'], d['seconds'], (d['gbps'] - 1) * 100)"
}
capped --io-bw 1G
# Buffered reads of a file in the page cache are faster than the cap on any machine, so
# they show the cap itself; the uncapped run first loads the cache.
capped --no-direct
capped --no-direct --io-bw 1G
echo "(O_DIRECT reaches the cap only when the disk itself exceeds 1 GB/s at that moment)"
