#!/usr/bin/env bash
# Installs what shardq needs from Debian packages and PyPI; idempotent: only what is
# missing is installed, and `apt-get update` runs only when something must be installed.
set -euo pipefail

debs=(
  build-essential cmake ninja-build pkg-config
  openmpi-bin libopenmpi-dev libhdf5-dev hdf5-tools
  libeigen3-dev libopenblas-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libtomlplusplus-dev libxxhash-dev libgtest-dev libgmock-dev libbenchmark-dev libhwy-dev libmimalloc-dev
  clang libclang-rt-14-dev gnuplot-nox time
  munge slurmctld slurmd slurm-client
  openssh-server openssh-client iproute2 # tests/cluster: hosts as network namespaces
  python3-pip
)

# The aarch64 check (scripts/test.sh): a cross compiler, qemu, and the kernels' libraries
# for arm64 beside the native ones (Debian multiarch).
arm64_debs=(
  g++-aarch64-linux-gnu qemu-user
  libhwy-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64 libopenblas-pthread-dev:arm64
  libfmt-dev:arm64 libxxhash-dev:arm64
)

missing=()
for p in "${debs[@]}" "${arm64_debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

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
