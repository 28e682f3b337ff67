#!/usr/bin/env bash
# Unpacks Debian's arm64 packages of everything shardq links (MPI, HDF5, the kernels'
# libraries, the loader and libc) into one folder: the aarch64 build's sysroot and qemu's
# library root (cmake/aarch64-linux-gnu.cmake). A folder and not multiarch packages: the arm64
# Open MPI and HDF5 development packages are not co-installable with the amd64 ones that the
# native build needs (apt would remove gcc), and a folder leaves the host's packages alone.
#
# Packages are only unpacked (no maintainer scripts run): nothing of arm64 is executed here
# except the binaries under qemu. Idempotent: a root stamped with this package list is kept.
set -euo pipefail

root=${1:-/opt/shardq/arm64-root}
# shellcheck source=linked-debs.sh
source "$(dirname "$0")/linked-debs.sh"
# The libraries, and the C and C++ runtimes that the cross compiler's own packages hold for
# the host only (OpenBLAS's Fortran runtime as well).
pkgs=(libc6-dev libstdc++-12-dev libgfortran5 "${linked_debs[@]}")
stamp="$root/.shardq-packages"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${pkgs[*]}" ]; then
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial"
: > "$work/status"
# apt on its own state: arm64 only, an empty package database, its own lists and cache.
apt_opts=(
  -o APT::Architecture=arm64 -o "APT::Architectures::=arm64"
  -o Dir::State::status="$work/status" -o Dir::State::Lists="$work/lists"
  -o Dir::Cache::archives="$work/archives" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
  -o APT::Install-Recommends=false -o Debug::NoLocking=true -o APT::Sandbox::User=root
)
echo "arm64-root: resolving and fetching ${#pkgs[@]} packages and their dependencies"
apt-get "${apt_opts[@]}" -qq update
DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" -qq -y --download-only install "${pkgs[@]}" >/dev/null

rm -rf "$root"
mkdir -p "$root"
for deb in "$work"/archives/*.deb; do
  dpkg-deb -x "$deb" "$root"
done
# The links Debian's maintainer scripts make through update-alternatives (OpenBLAS and Open MPI
# choose their flavour there), which an unpacked root lacks: the ones the build looks for.
multiarch=usr/lib/aarch64-linux-gnu
alternatives=(
  "$multiarch/libopenblas.a=openblas-pthread/libopenblas.a"
  "usr/include/aarch64-linux-gnu/cblas.h=openblas-pthread/cblas.h"
  "usr/include/aarch64-linux-gnu/openblas_config.h=openblas-pthread/openblas_config.h"
  "usr/include/aarch64-linux-gnu/f77blas.h=openblas-pthread/f77blas.h"
  "$multiarch/libmpi.so=openmpi/lib/libmpi.so"
)
for link in "${alternatives[@]}"; do
  ln -sfn "${link#*=}" "$root/${link%%=*}"
  [ -e "$root/${link%%=*}" ] || { echo "arm64-root: ${link%%=*} -> ${link#*=} points nowhere" >&2; exit 1; }
done
echo "${pkgs[*]}" > "$stamp"
echo "arm64-root: $(ls "$work"/archives/*.deb | wc -l) packages unpacked into $root ($(du -sh "$root" | cut -f1))"
