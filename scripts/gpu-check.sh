#!/usr/bin/env bash
# The GPU acceptance run of the CUDA backend, on a machine with an NVIDIA GPU. In one run:
#   1. the CUDA tests (ops against double precision and the CPU backend, block decoding,
#      whole models against the CPU backend for every weight and KV type, staged layers
#      against resident ones bit for bit, speculative output against target-only on the
#      GPU), each group with its own log, every group run even after one fails;
#   2. flashspec-gpubench: device-to-device copy bandwidth, mat-vec GB/s per weight type
#      on 7B shapes as a fraction of it, batched matmul, host->device copy rates, and
#      copies overlapping compute;
#   3. each --kv-type end to end: greedy tokens of --backend cuda against the CPU's;
#   4. end to end: the trained MoE fixture widened to the Qwen3.5-35B-A3B shape (Q4_0,
#      5.5 GB, its MTP layer too; flashspec-make-fixtures writes it in seconds, once, to
#      MODEL_DIR, and keeps it) streamed with a VRAM budget below its size, its MTP layer
#      drafting: target alone vs -d mtp --tree auto, greedy, tokens compared; and where
#      the pack carries llama.cpp's CUDA build (gpu-pack.sh, FS_LLAMA_DIR), llama.cpp on the
#      same model (the file without its MTP block, which b8967 refuses) with the largest
#      -ngl that fits the same VRAM budget, and with every layer offloaded and the fewest
#      --n-cpu-moe layers that fit (scripts/gpu-llama-offload.py).
# Exits non-zero when any step failed; every log is in MODEL_DIR. (The device-like backend's
# tests, "device path*", run on the CPU in CI and need fixtures made with npm: not here.)
#
#   scripts/gpu-check.sh [MODEL_DIR] [VRAM_BUDGET (default 2G)]
#
# On a lent GPU machine (the CUDA toolkit but none of the Debian libraries, nothing to
# install, the repository alone travels): FS_PACK=DIR names a folder scripts/gpu-pack.sh
# made on Debian (binaries, their libraries, the shared models), carried along. Without
# FS_PACK it builds into build-gpu for this GPU's architecture (a machine with the libraries).
# (The 7B-shape file numpy inflated from stories260K took minutes, past 6 on a GPU machine
# once: more than a lease can spare. The C++ inflater writes the larger file in ~15 s.)
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/flashspec-models}
VRAM=${2:-2G}
mkdir -p "$DIR"
failed=()

if [[ -n ${FS_PACK:-} ]]; then
  BIN=$FS_PACK/bin
  export LD_LIBRARY_PATH=$FS_PACK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export FLASHSPEC_SHARED_DIR=${FLASHSPEC_SHARED_DIR:-$FS_PACK/shared}
else
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=native >/dev/null &&
    cmake --build build-gpu -j"$(nproc)" || { echo "gpu-check: the build failed" >&2; exit 1; }
  BIN=build-gpu/bin
fi
SHARED=${FLASHSPEC_SHARED_DIR:-../shared}
STORIES=$SHARED/models/stories260K.gguf

for group in 'cuda backend*' 'block format*' 'cuda model*'; do
  log=$DIR/tests-${group%%\**}.log
  log=${log// /-}
  "$BIN/flashspec_tests" -tc="$group" -s >"$log" 2>&1 || failed+=("tests '$group' ($log)")
  grep -E 'MESSAGE|test cases:|assertions:' "$log" | sed "s|^|$group: |"
  if grep -q 'CUDA tests skipped' "$log"; then
    echo "gpu-check: the CUDA tests skipped (no usable GPU?)" >&2
    exit 1
  fi
done

"$BIN/flashspec-gpubench" --iters 20 | tee "$DIR/gpubench.jsonl" || failed+=(gpubench)

for kv in f16 f32 q8_0; do
  for be in cpu cuda; do
    "$BIN/flashspec" generate -m "$STORIES" -p "Once upon a time" -n 64 --temp 0 --ignore-eos \
      --kv-type "$kv" --backend "$be" --json >"$DIR/kv-$kv-$be.json" || failed+=("generate --kv-type $kv --backend $be")
  done
done

BIG=$DIR/qwen35moe-35b-a3b-q4_0.gguf
if [[ ! -f $BIG ]]; then
  "$BIN/flashspec-make-fixtures" --inflate tests/fixtures/trained-qwen35moe.gguf --shape qwen35moe-35b-a3b \
    --type q4_0 "$BIG" >"$DIR/inflate.log" 2>&1 || failed+=("the 35B-A3B-shape file ($DIR/inflate.log)")
fi
P="Once upon a time, there was a little girl named Lily"
common=(-m "$BIG" --backend cuda --stream --vram-budget "$VRAM" -p "$P" -n 64 --temp 0 --ignore-eos --json)
if [[ -f $BIG ]]; then
  "$BIN/flashspec" generate "${common[@]}" >"$DIR/main-alone.json" || failed+=("the main job, target alone")
  "$BIN/flashspec" generate "${common[@]}" -d mtp --tree auto \
    --trace "$DIR/main-auto-trace.json" >"$DIR/main-auto.json" || failed+=("the main job, --tree auto")
fi

if [[ -n ${FS_PACK:-} && -f $FS_PACK/llama.tar.xz ]]; then
  BARE=$DIR/qwen35moe-35b-a3b-no-mtp-q4_0.gguf
  if [[ ! -f $BARE ]]; then
    "$BIN/flashspec-make-fixtures" --inflate tests/fixtures/trained-qwen35moe.gguf --shape qwen35moe-35b-a3b \
      --type q4_0 --no-mtp "$BARE" >>"$DIR/inflate.log" 2>&1 || failed+=("the file without MTP ($DIR/inflate.log)")
  fi
  if tar -C "$DIR" -xJf "$FS_PACK/llama.tar.xz" && [[ -f $BARE ]]; then
    cuda_lib=${CUDA_HOME:-/usr/local/cuda}/lib64  # cuBLAS and the runtime: the machine's toolkit
    LD_LIBRARY_PATH=$DIR/llama/lib:$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
      python3 scripts/gpu-llama-offload.py "$DIR/llama/bin/llama-completion" "$BARE" "$VRAM" "$P" 64 \
      "$DIR/main-llama.json" >"$DIR/main-llama.log" 2>&1 || failed+=("llama.cpp's partial offload ($DIR/main-llama.log)")
  else
    failed+=("llama.cpp from the pack")
  fi
fi

python3 - "$DIR" <<'PY' || failed+=("a comparison")
import json, sys, os
d = sys.argv[1]
def load(name):  # None for a run that wrote nothing readable (its failure is listed already)
    try:
        with open(os.path.join(d, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        print(f"{name}: missing or not JSON")
        return None
ok = True
for kv in ("f16", "f32", "q8_0"):
    cpu, gpu = load(f"kv-{kv}-cpu.json"), load(f"kv-{kv}-cuda.json")
    if cpu is None or gpu is None:
        ok = False
        continue
    cpu, gpu = cpu["tokens"], gpu["tokens"]
    same = next((i for i, (a, b) in enumerate(zip(cpu, gpu)) if a != b), min(len(cpu), len(gpu)))
    print(f"--kv-type {kv}: cuda matches the cpu for {same} of {len(cpu)} greedy tokens")
    ok &= same == len(cpu)
a, b = load("main-alone.json"), load("main-auto.json")
if a is None or b is None:
    ok = False
else:
    rate = lambda r: r["stats"]["generated"] / r["stats"]["decode_ms"] * 1e3
    for name, r in (("target alone", a), ("--tree auto", b)):
        s = r["stats"]
        print(f"{name}: {rate(r):.2f} tok/s decode, tau {s['tau']:.2f}, "
              f"I/O busy {s['io_busy']:.2f}, {s['read_gbps']:.2f} GB/s read")
    same = a["tokens"] == b["tokens"]
    print(f"greedy tokens identical: {same}; speedup {rate(b) / rate(a):.2f}x")
    ok &= same
    if os.path.exists(os.path.join(d, "main-llama.json")):
        llama = load("main-llama.json") or {}
        for name in ("ngl", "n_cpu_moe"):
            r = llama.get(name)
            if r and r.get("tok_s"):
                print(f"llama.cpp {r['flags']} ({r['vram_mib']:.0f} MiB of VRAM): {r['tok_s']:.2f} tok/s; "
                      f"flashspec --tree auto {rate(b) / r['tok_s']:.2f}x, alone {rate(a) / r['tok_s']:.2f}x")
            else:
                print(f"llama.cpp {name}: no setting fits or the run failed")
sys.exit(0 if ok else 1)
PY

if ((${#failed[@]})); then
  printf 'gpu-check: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "gpu-check: every step passed (logs in $DIR)"
