#!/usr/bin/env bash
# Packs, on this Debian machine, everything scripts/gpu-check.sh needs on a lent GPU machine,
# into one folder of compressed archives that the device tool carries there. Those machines have the CUDA toolkit
# but none of the Debian libraries flashspec links (liburing, libedit, PCRE2, ...), and only
# the repository travels to them, not ../shared beside it. A GPU lease is about 15 minutes,
# so nothing is built there.
#
#   scripts/gpu-pack.sh [DIR]        (default: gpu-pack, which .gitignore ignores)
#
#   DIR/flashspec.tar.xz, stripped and compressed (the 64 MiB carried holds the repository
#               too, and llama.cpp's build beside it), holding:
#     bin/      flashspec, flashspec_tests, flashspec-gpubench, flashspec-make-fixtures (it
#               widens stories260K / salty279K to the 8B / 1B shapes and the trained MoE
#               fixture to the 35B-A3B shape there, in seconds), libflashspec-cuda.so, from
#               build/ (built first when missing; the plugin must hold sm_90 code)
#     lib/      every library they load but glibc's own, libstdc++ included (the machine's
#               may be older than the GCC 12 one they were linked against)
#     shared/   stories260K and salty279K (the CUDA tests read them; the 8B / 1B pair and the
#               tests' wide models are made from them there) and the tests' prompts
#
#   DIR/llama.tar.xz  only with FS_LLAMA_DIR=BUILD (a llama.cpp b8967 CUDA build folder, made
#               elsewhere, sm_90, GGML_CUDA_NCCL=OFF: NCCL alone is 190 MB): its llama-completion
#               and the libraries it loads, less glibc's and the CUDA toolkit's (the lent
#               machine has the toolkit), stripped and compressed, for gpu-check's side-by-side
#               with llama.cpp's partial offload
#
# Then, there:  FS_PACK=DIR scripts/gpu-check.sh [MODEL_DIR] [VRAM_BUDGET]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-gpu-pack}
SHARED=${FLASHSPEC_SHARED_DIR:-../shared}
BIN=build/bin
PROGRAMS=(flashspec flashspec_tests flashspec-gpubench flashspec-make-fixtures libflashspec-cuda.so)

missing=0
for p in "${PROGRAMS[@]}"; do [[ -f $BIN/$p ]] || missing=1; done
if ((missing)); then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)"
fi
for p in "${PROGRAMS[@]}"; do
  [[ -f $BIN/$p ]] || { echo "gpu-pack: no $BIN/$p after the build (is nvcc on the PATH?)" >&2; exit 1; }
done
# H100 and H200 are sm_90: the build's architectures (the default set, or the 90 alone that
# scripts/test.sh picks without a GPU) must hold it.
archs=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' build/CMakeCache.txt)
if [[ -n $archs && ! ";$archs;" =~ \;90(-real)?\; ]]; then
  echo "gpu-pack: build/ is configured for CUDA architectures '$archs', without 90 (H100/H200)" >&2
  exit 1
fi

rm -rf "$DIR"
mkdir -p "$DIR"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/shared/models" "$stage/shared/reference"
for p in "${PROGRAMS[@]}"; do
  cp "$BIN/$p" "$stage/bin/"
  strip --strip-unneeded "$stage/bin/$p"
done
# The libraries as ldd resolves them here, less glibc's (the loader, libc, libm, ...: those
# must come from the machine itself) and the kernel's vDSO.
for p in "${PROGRAMS[@]}"; do ldd "$BIN/$p"; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
cp "$SHARED/models/stories260K.gguf" "$SHARED/models/salty279K.gguf" "$stage/shared/models/"
# The CUDA model tests' prompts; their wide models gpu-check makes there (too large to carry).
cp "$SHARED"/reference/{stories260K,salty279K}*.llamacpp.json "$stage/shared/reference/"
# What runs there must run here from the pack alone.
LD_LIBRARY_PATH=$stage/lib "$stage/bin/flashspec" --version >/dev/null
LD_LIBRARY_PATH=$stage/lib "$stage/bin/flashspec_tests" -ltc >/dev/null
tar -C "$stage" -cf - bin lib shared | xz -9 -T0 >"$DIR/flashspec.tar.xz"

if [[ -n ${FS_LLAMA_DIR:-} ]]; then
  llama=$FS_LLAMA_DIR/bin/llama-completion
  [[ -x $llama ]] || { echo "gpu-pack: no $llama (FS_LLAMA_DIR names a llama.cpp build folder)" >&2; exit 1; }
  mkdir -p "$stage/llama/bin" "$stage/llama/lib"
  cp "$llama" "$stage/llama/bin/"
  ldd "$llama" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^/]*|libcuda|libcudart|libcublas(Lt)?|libnccl)\.so' |
    while read -r lib; do cp -L "$lib" "$stage/llama/lib/"; done
  strip --strip-unneeded "$stage"/llama/bin/* "$stage"/llama/lib/*
  tar -C "$stage" -cf - llama | xz -9 -T0 >"$DIR/llama.tar.xz"
fi
# The device tool carries the repository's files and the pack together, 64 MiB at most.
pack=$(du -sb "$DIR" | cut -f1)
repo=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
if ((pack + repo > 64 << 20)); then
  echo "gpu-pack: $DIR holds $((pack >> 20)) MiB and the repository $((repo >> 20)) MiB, more than the 64 MiB" \
    "the device tool carries" >&2
  exit 1
fi
echo "gpu-pack: $((pack >> 20)) MiB in $DIR, $((repo >> 20)) MiB of repository beside it (the device tool carries" \
  "at most 64 MiB); there: FS_PACK=$DIR scripts/gpu-check.sh"
