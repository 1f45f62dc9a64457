#!/usr/bin/env bash
# Installs the Debian 12 packages the project needs (only those missing), then configures and
# builds everything into ./build. Idempotent and quiet when there is nothing to do.
#
#   scripts/setup.sh            # install what is missing, configure, build
#   MLCD_BUILD_DIR=dir MLCD_JOBS=n scripts/setup.sh
#   MLCD_SETUP_PACKAGES_ONLY=1 scripts/setup.sh   # only the packages (deploy/Dockerfile)
#   MLCD_CMAKE_ARGS="-DMLCD_WERROR=ON" scripts/setup.sh   # extra configure options (kept in
#                                                         # the build dir's cache)
#   MLCD_TORCH=pip scripts/setup.sh   # the second flavour (docs/torch-builds.md): the `torch`
#       wheel (MLCD_TORCH_VERSION, default below) in a virtual environment under the build dir
#       (default ./build-torch2), the worker built against its libtorch 2.x with CUDA and NCCL
#       (-DMLCD_WITH_CUDA=ON; needs the CUDA toolkit's nvcc, no GPU)
#   MLCD_SETUP_CONFIGURE_ONLY=1 scripts/setup.sh   # packages and configure, no build
#   MLCD_TORCH=pip MLCD_SETUP_VENV_ONLY=1 scripts/setup.sh   # packages and the pip flavour's
#       virtual environment (the wheel, the interop packages), no configure: the test command
#       runs it in the background during the first build (downloads, not compiling)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
torch_flavour=${MLCD_TORCH:-debian}
case "$torch_flavour" in
  debian) build_dir=${MLCD_BUILD_DIR:-$root/build} ;;
  pip) build_dir=${MLCD_BUILD_DIR:-$root/build-torch2} ;;
  *) echo "setup: MLCD_TORCH=$torch_flavour: use debian (default) or pip" >&2; exit 2 ;;
esac
# The wheel the pip flavour builds against (the GPU machines' PyTorch is 2.11.0+cu130).
torch_version=${MLCD_TORCH_VERSION:-2.11.0}
jobs=${MLCD_JOBS:-$(nproc)}

packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # tensors, autograd, c10d (Gloo); a fast BLAS for torch and FAISS
  libtorch-dev libgloo-dev libopenblas0-pthread
  # RPC
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # TLS: OpenSSL checks certificates and hashes tokens (common/tls_config, common/tokens);
  # the openssl tool makes the local cluster's and the tests' certificates
  libssl-dev openssl
  # clustering, storage, metrics
  libfaiss-dev librocksdb-dev prometheus-cpp-dev zlib1g-dev
  # CLI, config, JSON
  libcli11-dev libyaml-cpp-dev nlohmann-json3-dev
  # tests and benchmarks
  libgtest-dev libbenchmark-dev python3-torch python3-numpy python3-pytest python3-grpcio
  python3-yaml prometheus kubernetes-client yamllint
  # real data
  dataset-fashion-mnist
  # dataset index of WebDataset shards (common/dataset/)
  libarchive-dev
  # images: decoders (worker/data), torchvision for the interop tests (tests/export,
  # tests/worker_data) and the input-pipeline benchmark
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libwebp-dev python3-torchvision python3-pil
  # clang: libFuzzer and the sanitizer runtimes (scripts/run_fuzzers.sh, docs/hardening.md; the
  # sanitizer builds of scripts/run_sanitizer_tests.sh are clang too), and LLVM's OpenMP, which
  # FAISS's OpenMP needs when clang compiles (find_package(OpenMP) in CMakeLists.txt)
  clang libclang-rt-14-dev libomp-dev
)
# The pip flavour's virtual environment.
[ "$torch_flavour" = pip ] && packages+=(python3-venv python3-pip)

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
if [ "$torch_flavour" = pip ]; then
  venv="$build_dir/venv"
  if [ ! -x "$venv/bin/python3" ]; then
    mkdir -p "$build_dir"
    python3 -m venv "$venv"
  fi
  if ! "$venv/bin/python3" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" 2>/dev/null; then
    echo "setup: installing the torch $torch_version wheel into $venv (about 4.5 GB with its CUDA libraries)"
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check "torch==$torch_version"
  fi
  # The interop tests' packages (transformers, safetensors, tensorboard, grpcio-tools), pinned.
  requirements="$root/scripts/interop-requirements.txt"
  stamp="$venv/.interop-requirements"
  if ! cmp -s "$requirements" "$stamp"; then
    echo "setup: installing the interop test packages into $venv ($(grep -c '==' "$requirements") pinned)"
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$stamp"
  fi
  # The oldest transformers the exports are tested with, in a folder of its own (its
  # huggingface_hub and tokenizers differ from the pinned transformers').
  old_requirements="$root/scripts/interop-old-transformers.txt"
  old_target="$venv/old-transformers"
  if ! cmp -s "$old_requirements" "$old_target/.requirements"; then
    echo "setup: installing the oldest tested transformers into $old_target"
    rm -rf "$old_target"
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check --no-deps \
      --target "$old_target" -r "$old_requirements"
    cp "$old_requirements" "$old_target/.requirements"
  fi
  if [ "${MLCD_SETUP_VENV_ONLY:-0}" = 1 ]; then
    exit 0
  fi
  torch_dir=$("$venv/bin/python3" -c "import torch.utils; print(torch.utils.cmake_prefix_path)" 2>/dev/null)/Torch
  if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "setup: MLCD_TORCH=pip builds the CUDA worker and needs the CUDA toolkit (nvcc); none found" >&2
    exit 1
  fi
  extra_args+=("-DTorch_DIR=$torch_dir" -DMLCD_WITH_CUDA=ON)
fi
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra_args[@]}" >/dev/null
elif ((${#extra_args[@]})); then
  cmake -S "$root" -B "$build_dir" "${extra_args[@]}" >/dev/null
fi
if [ "${MLCD_SETUP_CONFIGURE_ONLY:-0}" = 1 ]; then
  exit 0
fi
echo "setup: building in $build_dir with $jobs jobs"
cmake --build "$build_dir" -j "$jobs"
