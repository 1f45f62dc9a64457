#!/usr/bin/env bash
# Installs the Debian 12 packages the project needs (only those missing), then configures and
# builds everything into ./build. Idempotent and quiet when there is nothing to do.
#
#   scripts/setup.sh            # install what is missing, configure, build
#   MLCD_BUILD_DIR=dir MLCD_JOBS=n scripts/setup.sh
#   MLCD_SETUP_PACKAGES_ONLY=1 scripts/setup.sh   # only the packages (deploy/Dockerfile)
#   MLCD_CMAKE_ARGS="-DMLCD_WERROR=ON" scripts/setup.sh   # extra configure options (kept in
#                                                         # the build dir's cache)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${MLCD_BUILD_DIR:-$root/build}
jobs=${MLCD_JOBS:-$(nproc)}

packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # tensors, autograd, c10d (Gloo); a fast BLAS for torch and FAISS
  libtorch-dev libgloo-dev libopenblas0-pthread
  # RPC
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # clustering, storage, metrics
  libfaiss-dev librocksdb-dev prometheus-cpp-dev zlib1g-dev
  # CLI, config, JSON
  libcli11-dev libyaml-cpp-dev nlohmann-json3-dev
  # tests and benchmarks
  libgtest-dev libbenchmark-dev python3-torch python3-numpy python3-grpcio python3-yaml
  prometheus kubernetes-client yamllint
  # real data
  dataset-fashion-mnist
  # dataset index of WebDataset shards (common/dataset/)
  libarchive-dev
  # images
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libwebp-dev python3-torchvision python3-pil
)

missing=()
for p in "${packages[@]}"; do
  # Debian 12 ships kubectl as kubernetes-client; a kubectl installed otherwise will do.
  if [ "$p" = kubernetes-client ] && command -v kubectl >/dev/null 2>&1; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The prometheus package starts a system service on Debian; the project runs its own
# instances on loopback in tests and does not need that one.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
  systemctl stop prometheus >/dev/null 2>&1 || true
fi

if [ "${MLCD_SETUP_PACKAGES_ONLY:-0}" = 1 ]; then
  exit 0
fi

# shellcheck disable=SC2206
extra_args=(${MLCD_CMAKE_ARGS:-})
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra_args[@]}" >/dev/null
elif ((${#extra_args[@]})); then
  cmake -S "$root" -B "$build_dir" "${extra_args[@]}" >/dev/null
fi
echo "setup: building in $build_dir with $jobs jobs"
cmake --build "$build_dir" -j "$jobs"
