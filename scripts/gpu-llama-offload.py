#!/usr/bin/env python3
"""llama.cpp's partial offload at a VRAM budget, for scripts/gpu-check.sh's side-by-side.

  gpu-llama-offload.py LLAMA_COMPLETION MODEL.gguf VRAM_BUDGET PROMPT N_PREDICT CTX OUT.json

llama.cpp has no VRAM budget of its own: it puts -ngl layers (and with --n-cpu-moe M the
experts of the first M layers stay on the CPU) on the GPU whatever they weigh. So this
finds, by short runs (-n 1) that read the CUDA0 buffer sizes llama.cpp prints (model, KV,
recurrent state, compute), the largest -ngl whose buffers fit VRAM_BUDGET, and with every
layer offloaded the fewest --n-cpu-moe layers that fit (a mixture of experts' usual
setting); both are monotone, so a bisection takes a few runs. Then it times each at
N_PREDICT greedy tokens of PROMPT, its KV cache sized for CTX positions (-c, as flashspec's
--ctx in the same comparison), and writes what it chose and measured to OUT.json:
{"ngl": {"value": N, "vram_mib": ..., "tok_s": ...}, "n_cpu_moe": {...}} (a setting that
no value fits is null). VRAM_BUDGET as flashspec reads it: K/M/G/T decimal, KiB/MiB/GiB
binary.
"""
import json
import re
import subprocess
import sys

BUFFER = re.compile(r"CUDA0 (?:model|KV|RS|compute) buffer size\s*=\s*([0-9.]+) MiB")
EVAL = re.compile(r"^\S*:?\s*eval time =.*?([0-9.]+) tokens per second", re.M)
UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text):
    m = re.fullmatch(r"([0-9.]+)\s*([A-Za-z]*)", text.strip())
    if not m or m.group(2).upper() not in UNITS:
        raise SystemExit(f"gpu-llama-offload: '{text}' is not a size (512M, 2G, 1.5GiB)")
    return float(m.group(1)) * UNITS[m.group(2).upper()]


def run(binary, model, prompt, n, ctx, extra):
    # -fit off: llama.cpp b8967 would otherwise move layers to fit the free VRAM itself.
    cmd = [binary, "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "-c", str(ctx), "-no-cnv",
           "--ignore-eos", "-fit", "off"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def vram_mib(binary, model, prompt, ctx, extra):
    """CUDA0 MiB of one short run with these flags; None when it fails (out of memory)."""
    rc, log = run(binary, model, prompt, 1, ctx, extra)
    if rc != 0:
        return None
    return sum(float(x) for x in BUFFER.findall(log))


def bisect(lo, hi, fits):
    """The largest v in [lo, hi] with fits(v), fits monotone (true up to some v); None if none."""
    if not fits(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def main():
    if len(sys.argv) != 8:
        raise SystemExit(__doc__.strip().splitlines()[2])
    binary, model, budget_text, prompt, n_text, ctx_text, out = sys.argv[1:]
    budget_mib = parse_size(budget_text) / 2**20
    n, ctx = int(n_text), int(ctx_text)
    # -ngl above the layer count offloads every layer and the output layer; the searches stop
    # at 64 layers (7 short runs each).
    layers = 64
    seen = {}

    def fits(flags):
        key = tuple(flags)
        if key not in seen:
            seen[key] = vram_mib(binary, model, prompt, ctx, flags)
        return seen[key] is not None and seen[key] <= budget_mib

    result = {"budget_mib": budget_mib}
    ngl = bisect(0, layers, lambda v: fits(["-ngl", str(v)]))
    # --n-cpu-moe M keeps the experts of layers 0..M-1 on the CPU: fewer M, more VRAM.
    moe = bisect(-layers, 0, lambda v: fits(["-ngl", str(layers), "--n-cpu-moe", str(-v)]))
    for name, flags in (("ngl", None if ngl is None else ["-ngl", str(ngl)]),
                        ("n_cpu_moe", None if moe is None else ["-ngl", str(layers), "--n-cpu-moe", str(-moe)])):
        if flags is None:
            result[name] = None
            continue
        rc, log = run(binary, model, prompt, n, ctx, flags)
        rates = EVAL.findall(log)
        result[name] = {"flags": " ".join(flags), "vram_mib": seen[tuple(flags)],
                        "tok_s": float(rates[-1]) if rc == 0 and rates else None}
        if result[name]["tok_s"] is None:
            print(f"gpu-llama-offload: llama.cpp {' '.join(flags)} failed (exit {rc}):\n{log[-2000:]}", file=sys.stderr)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
