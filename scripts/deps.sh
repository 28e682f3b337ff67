#!/usr/bin/env bash
# Installs what shardq needs from Debian packages and PyPI; idempotent: only what is
# missing is installed, and `apt-get update` runs only when something must be installed.
set -euo pipefail

# shellcheck source=linked-debs.sh
source "$(dirname "$0")/linked-debs.sh"
debs=(
  build-essential cmake ninja-build pkg-config
  "${linked_debs[@]}" libbenchmark-dev
  openmpi-bin hdf5-tools
  clang libclang-rt-14-dev gnuplot-nox time
  munge slurmctld slurmd slurm-client
  openssh-server openssh-client iproute2 # tests/cluster: hosts as network namespaces
  python3-pip
)

# The aarch64 check (scripts/test.sh; SHARDQ_SKIP_AARCH64=1 leaves it out, as the demo
# does): a cross compiler and qemu; the arm64 libraries are unpacked into their own root below.
# On an aarch64 machine the native build is the aarch64 one and there is nothing to add.
[ "$(uname -m)" = aarch64 ] && SHARDQ_SKIP_AARCH64=1
arm64_debs=()
[ "${SHARDQ_SKIP_AARCH64:-0}" = 1 ] || arm64_debs=(g++-aarch64-linux-gnu qemu-user)

SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
missing=()
for p in "${debs[@]}" "${arm64_debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Everything shardq links, for arm64 (Debian's packages unpacked, not installed).
[ "${SHARDQ_SKIP_AARCH64:-0}" = 1 ] || $SUDO bash "$(dirname "$0")/arm64-root.sh"

# Interop tests use the real clients from PyPI.
py=(numpy safetensors ml_dtypes pytest)
need_py=()
for m in "${py[@]}"; do
  python3 -c "import ${m}" 2>/dev/null || need_py+=("$m")
done
if ((${#need_py[@]})); then
  echo "deps: pip installing ${need_py[*]}"
  python3 -m pip install -q --disable-pip-version-check "${need_py[@]}"
fi
