#!/usr/bin/env bash
# Installs the Debian packages flashspec needs, only those missing. CUDA is not
# installed here: it is optional and detected at configure time.
set -euo pipefail
pkgs=(build-essential cmake pkg-config liburing-dev libcli11-dev doctest-dev
      libpcre2-dev libutf8proc-dev nlohmann-json3-dev libcpp-httplib-dev libedit-dev zlib1g-dev
      python3-numpy fio clang libclang-rt-14-dev
      librsvg2-bin)  # rsvg-convert: the bench test renders its plots
# Node.js runs the server tests' real client (the openai npm package, tests/client);
# Debian's nodejs/npm only where no node is installed already.
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
