#!/usr/bin/env bash
# The GPU acceptance run of the CUDA backend, on a machine with an NVIDIA GPU. In one run,
# each step selected by FS_STEPS (default: all of "tests layer kv pair llama moe bench"):
#   tests  the CUDA tests (ops against double precision and the CPU backend, block decoding,
#          whole models against the CPU backend for every weight and KV type, staged layers
#          against resident ones bit for bit, speculative output against target-only on the
#          GPU), each group with its own log, every group run even after one fails;
#   layer  flashspec-gpubench --layer-only: the device-to-device copy bandwidth, a whole
#          8B-shape layer's seven matmuls at T = 1 and T = 16 for Q4_0, Q8_0 and Q4_K, and
#          a Qwen3.5-35B-A3B layer's recurrent core (decode, a 16-node tree, a prompt, a
#          commit's replay);
#   kv     each --kv-type end to end: greedy tokens of --backend cuda against the CPU's;
#   pair   the main job: stories260K / salty279K widened to the Llama-3.1-8B / 3.2-1B shapes
#          at Q4_0 (function-exact; flashspec-make-fixtures writes them in seconds, once, to
#          MODEL_DIR, and keeps them), the 8B target under --vram-budget VRAM_BUDGET (the
#          layers that do not fit staged into VRAM each pass: from pinned RAM, and with
#          --stream from storage), the 1B draft resident: target alone vs -d 1B --tree auto,
#          greedy, tokens compared; all layers in VRAM beside it; the disk's O_DIRECT rate;
#          each run's VRAM peak beside its plan, and under the budget (which counts the
#          draft, the KV cache of --ctx CTX and a pass's working memory, as llama.cpp's -ngl
#          search counts its buffers at -c CTX);
#   llama  where the pack carries llama.cpp's CUDA build (gpu-pack.sh, FS_LLAMA_DIR):
#          llama.cpp on the same 8B file with the largest -ngl that fits the same VRAM
#          budget (scripts/gpu-llama-offload.py), the same prompt and length;
#   moe    the trained MoE fixture widened to the Qwen3.5-35B-A3B shape (Q4_0, 5.5 GB, its
#          MTP layer too) streamed under the VRAM budget, its MTP layer drafting: target
#          alone vs -d mtp --tree auto; with llama.cpp in the pack, llama.cpp on the file
#          without its MTP block (which b8967 refuses), the largest -ngl and the fewest
#          --n-cpu-moe that fit;
#   bench  the rest of flashspec-gpubench: mat-vec per weight type and grid, batched matmul,
#          host->device copy rates, copies overlapping compute.
# Exits non-zero when any step failed; every log is in MODEL_DIR. (The device-like backend's
# tests, "device path*", run on the CPU in CI and need fixtures made with npm: not here.)
#
#   [FS_STEPS="..."] scripts/gpu-check.sh [MODEL_DIR] [VRAM_BUDGET (default 2G)]
#
# On a lent GPU machine (the CUDA toolkit but none of the Debian libraries, nothing to
# install, the repository alone travels): FS_PACK=DIR names a folder scripts/gpu-pack.sh
# made on Debian (flashspec.tar.xz: binaries, their libraries, the shared models; maybe
# llama.tar.xz), carried along and unpacked into MODEL_DIR. Without FS_PACK it builds into
# build-gpu for this GPU's architecture (a machine with the libraries).
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/flashspec-models}
VRAM=${2:-2G}
STEPS=" ${FS_STEPS:-tests layer kv pair llama moe bench} "
step() { [[ $STEPS == *" $1 "* ]]; }
mkdir -p "$DIR"
failed=()
# Seconds since the start, on each step's first line: where a lease's minutes went.
began=$SECONDS
say() { echo "[$((SECONDS - began)) s] $*"; }

# unpack ARCHIVE DIR: python's tarfile, since a lent machine need not have xz.
unpack() { python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"; }

if [[ -n ${FS_PACK:-} ]]; then
  PACK=$FS_PACK
  if [[ -f $FS_PACK/flashspec.tar.xz ]]; then
    PACK=$DIR/pack
    rm -rf "$PACK" && mkdir -p "$PACK" && unpack "$FS_PACK/flashspec.tar.xz" "$PACK" ||
      { echo "gpu-check: cannot unpack $FS_PACK/flashspec.tar.xz" >&2; exit 1; }
  fi
  BIN=$PACK/bin
  export LD_LIBRARY_PATH=$PACK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export FLASHSPEC_SHARED_DIR=${FLASHSPEC_SHARED_DIR:-$PACK/shared}
else
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=native >/dev/null &&
    cmake --build build-gpu -j"$(nproc)" || { echo "gpu-check: the build failed" >&2; exit 1; }
  BIN=build-gpu/bin
fi
SHARED=${FLASHSPEC_SHARED_DIR:-../shared}
STORIES=$SHARED/models/stories260K.gguf
LLAMA=
if [[ -n ${FS_PACK:-} && -f $FS_PACK/llama.tar.xz ]] && step llama; then
  if unpack "$FS_PACK/llama.tar.xz" "$DIR"; then
    LLAMA=$DIR/llama/bin/llama-completion
  else
    failed+=("llama.cpp from the pack")
  fi
fi
# llama.cpp's partial offload at the VRAM budget: gpu-llama-offload.py MODEL NAME
llama_offload() {
  local cuda_lib=${CUDA_HOME:-/usr/local/cuda}/lib64  # cuBLAS and the runtime: the machine's toolkit
  LD_LIBRARY_PATH=$DIR/llama/lib:$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
    python3 scripts/gpu-llama-offload.py "$LLAMA" "$1" "$VRAM" "$P" 64 "$CTX" "$DIR/$2-llama.json" \
    >"$DIR/$2-llama.log" 2>&1 || failed+=("llama.cpp's partial offload ($DIR/$2-llama.log)")
}
P="Once upon a time, there was a little girl named Lily"
# Both engines size their KV caches for the same context (flashspec --ctx, llama.cpp -c),
# counted in the same VRAM budget.
CTX=128

# The CUDA model tests' stories260K-wide files (dim 256, 8 layers) are too large to carry:
# in a pack's shared folder they are stand-ins made here, the same shape widened by the C++
# inflater and quantized by flashspec (Q4_K alone where the shared file is Q4_K_M). The
# tests compare the GPU with the CPU on the same file, so any such file serves.
if step tests && [[ -n ${FS_PACK:-} ]]; then
  wide=$FLASHSPEC_SHARED_DIR/models/stories260K-wide
  [[ -f $wide-f32.gguf ]] ||
    "$BIN/flashspec-make-fixtures" --inflate "$STORIES" --shape stories260K-wide --type f32 "$wide-f32.gguf" \
      >>"$DIR/inflate.log" 2>&1 || failed+=("the tests' wide model ($DIR/inflate.log)")
  for t in q8_0 q4_0 q4_k; do
    out=$wide-${t/q4_k/q4_k_m}.gguf
    [[ -f $out || ! -f $wide-f32.gguf ]] ||
      "$BIN/flashspec" quantize "$wide-f32.gguf" "$out" --type "$t" >>"$DIR/inflate.log" 2>&1 ||
      failed+=("the tests' wide $t model ($DIR/inflate.log)")
  done
fi

if step tests; then
  for group in 'cuda backend*' 'block format*' 'cuda model*'; do
    say "tests '$group'"
    log=$DIR/tests-${group%%\**}.log
    log=${log// /-}
    "$BIN/flashspec_tests" -tc="$group" -s >"$log" 2>&1 || failed+=("tests '$group' ($log)")
    grep -E 'ERROR|FAILED|test cases:|assertions:' "$log" | head -40 | sed "s|^|$group: |"
    if grep -q 'CUDA tests skipped' "$log"; then
      echo "gpu-check: the CUDA tests skipped (no usable GPU?)" >&2
      exit 1
    fi
  done
fi

if step layer; then
  say "gpubench --layer-only"
  "$BIN/flashspec-gpubench" --iters 20 --layer-only | tee "$DIR/gpubench-layer.jsonl" || failed+=("gpubench --layer-only")
fi

if step kv; then
  say "--kv-type, cuda against cpu"
  for kv in f16 f32 q8_0; do
    for be in cpu cuda; do
      "$BIN/flashspec" generate -m "$STORIES" -p "Once upon a time" -n 64 --temp 0 --ignore-eos \
        --kv-type "$kv" --backend "$be" --json >"$DIR/kv-$kv-$be.json" || failed+=("generate --kv-type $kv --backend $be")
    done
  done
fi

# inflate SOURCE SHAPE OUT [ARGS...]: a widened file, made once (flashspec-make-fixtures writes
# it under a temporary name and renames it, so a file that exists is whole).
inflate() {
  local src=$1 shape=$2 out=$3
  shift 3
  [[ -f $out ]] && return 0
  local t0=$SECONDS
  "$BIN/flashspec-make-fixtures" --inflate "$src" --shape "$shape" --type q4_0 "$@" "$out" >>"$DIR/inflate.log" 2>&1 ||
    { failed+=("the $shape file ($DIR/inflate.log)"); return 1; }
  say "$out: $(($(stat -c %s "$out") >> 20)) MiB written in $((SECONDS - t0)) s"
}

if step pair; then
  say "the 8B / 1B pair"
  T8B=$DIR/llama-8b-q4_0.gguf D1B=$DIR/llama-1b-q4_0.gguf
  if inflate "$STORIES" llama-8b "$T8B" && inflate "$SHARED/models/salty279K.gguf" llama-1b "$D1B"; then
    # The disk's O_DIRECT read rate, for the streamed runs' figures.
    dd if="$T8B" of=/dev/null bs=8M count=256 iflag=direct 2>&1 | tail -1 | sed 's/^/disk (dd, O_DIRECT): /'
    pair() {  # NAME N ARGS...
      local name=$1 n=$2
      shift 2
      say "pair: $name"
      "$BIN/flashspec" generate -m "$T8B" --backend cuda -p "$P" -n "$n" --ctx "$CTX" --temp 0 --ignore-eos --json "$@" \
        >"$DIR/pair-$name.json" 2>"$DIR/pair-$name.log" || failed+=("the 8B main job, $name ($DIR/pair-$name.log)")
    }
    pair resident 64
    pair ram-alone 64 --vram-budget "$VRAM"
    pair ram-auto 64 --vram-budget "$VRAM" -d "$D1B" --tree auto
    # Storage-bound: fewer tokens (each target-alone token reads ~2.5 GB from the disk).
    pair disk-alone 16 --vram-budget "$VRAM" --stream
    pair disk-auto 16 --vram-budget "$VRAM" --stream -d "$D1B" --tree auto
  fi
  if [[ -n $LLAMA && -f $T8B ]]; then
    say "llama.cpp on the 8B file"
    llama_offload "$T8B" pair
  fi
fi

if step moe; then
  say "the 35B-A3B-shape MoE"
  BIG=$DIR/qwen35moe-35b-a3b-q4_0.gguf
  inflate tests/fixtures/trained-qwen35moe.gguf qwen35moe-35b-a3b "$BIG"
  common=(-m "$BIG" --backend cuda --stream --vram-budget "$VRAM" -p "$P" -n 64 --ctx "$CTX" --temp 0 --ignore-eos --json)
  if [[ -f $BIG ]]; then
    "$BIN/flashspec" generate "${common[@]}" >"$DIR/main-alone.json" || failed+=("the main job, target alone")
    "$BIN/flashspec" generate "${common[@]}" -d mtp --tree auto \
      --trace "$DIR/main-auto-trace.json" >"$DIR/main-auto.json" || failed+=("the main job, --tree auto")
  fi
  if [[ -n $LLAMA ]]; then
    BARE=$DIR/qwen35moe-35b-a3b-no-mtp-q4_0.gguf
    inflate tests/fixtures/trained-qwen35moe.gguf qwen35moe-35b-a3b "$BARE" --no-mtp && llama_offload "$BARE" main
  fi
fi

if step bench; then
  say "gpubench"
  "$BIN/flashspec-gpubench" --iters 20 | grep -v '"layer_pass"' | tee "$DIR/gpubench.jsonl" || failed+=(gpubench)
fi

say "comparisons"
python3 - "$DIR" "$STEPS" <<'PY' || failed+=("a comparison")
import json, sys, os
d, steps = sys.argv[1], sys.argv[2].split()
def load(name):  # None for a run that wrote nothing readable (its failure is listed already)
    try:
        with open(os.path.join(d, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        print(f"{name}: missing or not JSON")
        return None
def rate(r):
    return r["stats"]["generated"] / r["stats"]["decode_ms"] * 1e3
def show(name, r):  # False when a run under --vram-budget held more VRAM than the budget
    s = r["stats"]
    vram = r["placement"].get("vram", {})
    peak = r.get("peak_vram_bytes", 0)
    print(f"{name}: {rate(r):.2f} tok/s decode, tau {s.get('tau', 1):.2f}, I/O busy {s.get('io_busy', 0):.2f}, "
          f"{s.get('read_gbps', 0):.2f} GB/s read; VRAM peak {peak / 2**20:.0f} MiB, planned "
          f"{vram.get('total_bytes', 0) / 2**20:.0f} MiB ({vram.get('n_layers', 0)} layers resident)")
    if "budget_bytes" in vram and peak > vram["budget_bytes"]:
        print(f"{name}: VRAM peak {peak / 2**20:.0f} MiB is over --vram-budget {vram['budget_bytes'] / 2**20:.0f} MiB")
        return False
    return True
def versus(alone, auto, what):  # the same greedy tokens, and the speedup
    same = alone["tokens"] == auto["tokens"]
    print(f"{what}: greedy tokens identical: {same}; --tree auto {rate(auto) / rate(alone):.2f}x the target alone")
    return same
def against_llama(name, runs):  # runs: (label, flashspec result) to set beside llama.cpp's
    path = f"{name}-llama.json"
    if not os.path.exists(os.path.join(d, path)):
        return
    llama = load(path) or {}
    for key in ("ngl", "n_cpu_moe"):
        r = llama.get(key)
        if r and r.get("tok_s"):
            ratios = ", ".join(f"{label} {rate(x) / r['tok_s']:.2f}x" for label, x in runs if x)
            print(f"llama.cpp {r['flags']} ({r['vram_mib']:.0f} MiB of VRAM): {r['tok_s']:.2f} tok/s; flashspec: {ratios}")
        elif key == "ngl" or r:
            print(f"llama.cpp {key}: no setting fits or the run failed")
ok = True
if "kv" in steps:
    for kv in ("f16", "f32", "q8_0"):
        cpu, gpu = load(f"kv-{kv}-cpu.json"), load(f"kv-{kv}-cuda.json")
        if cpu is None or gpu is None:
            ok = False
            continue
        cpu, gpu = cpu["tokens"], gpu["tokens"]
        same = next((i for i, (a, b) in enumerate(zip(cpu, gpu)) if a != b), min(len(cpu), len(gpu)))
        print(f"--kv-type {kv}: cuda matches the cpu for {same} of {len(cpu)} greedy tokens")
        ok &= same == len(cpu)
if "pair" in steps:
    runs = {n: load(f"pair-{n}.json") for n in ("resident", "ram-alone", "ram-auto", "disk-alone", "disk-auto")}
    for n, r in runs.items():
        if r is None:
            ok = False
        else:
            ok &= show(f"8B {n}", r)
    for where in ("ram", "disk"):
        a, b = runs[f"{where}-alone"], runs[f"{where}-auto"]
        if a and b:
            ok &= versus(a, b, f"8B staged from {where}")
    if runs["resident"] and runs["ram-alone"]:
        ok &= runs["resident"]["tokens"] == runs["ram-alone"]["tokens"]
    against_llama("pair", [(f"{n}", runs[n]) for n in ("ram-alone", "ram-auto", "disk-alone", "disk-auto")])
if "moe" in steps:
    a, b = load("main-alone.json"), load("main-auto.json")
    if a is None or b is None:
        ok = False
    else:
        ok &= show("35B-A3B target alone", a)
        ok &= show("35B-A3B --tree auto", b)
        ok &= versus(a, b, "35B-A3B streamed")
        against_llama("main", [("alone", a), ("--tree auto", b)])
sys.exit(0 if ok else 1)
PY

if ((${#failed[@]})); then
  printf 'gpu-check: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "gpu-check: every step passed (logs in $DIR)"
