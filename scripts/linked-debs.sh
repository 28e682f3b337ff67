# shellcheck shell=bash
# The Debian development packages of every library shardq links, in one list (sourced):
# scripts/deps.sh installs them for this machine, scripts/arm64-root.sh unpacks their arm64
# builds for the aarch64 one. A new library is added here, once.
# shellcheck disable=SC2034
linked_debs=(
  libopenmpi-dev libhdf5-dev libeigen3-dev libopenblas-dev libhwy-dev libmimalloc-dev
  libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libxxhash-dev
  libgtest-dev libgmock-dev
)
