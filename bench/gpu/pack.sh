#!/usr/bin/env bash
# Packs the pip-flavour (CUDA) binaries and the Debian shared libraries they need but a GPU
# machine's image lacks into one folder, for a GPU machine that has the same torch wheel
# (bench/RESULTS.md "GPU step"). libtorch, CUDA and NCCL come from that machine's torch.
#   bench/gpu/pack.sh build-torch2 .devbin
set -euo pipefail
build=${1:-build-torch2}
out=${2:-.devbin}
rm -rf "$out"
mkdir -p "$out/lib"
for b in mlcd-worker worker_step_bench worker_train_step_test worker_vit_test worker_partial_fc_test worker_collectives_test; do
  strip -o "$out/$b" "$build/bin/$b"
done
# Everything ldd resolves outside the torch wheel and glibc / the C++ runtime.
for b in "$out"/mlcd-worker "$out"/worker_*; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E 'site-packages|/libc\.so|/libm\.so|/libpthread|/libdl\.|/librt\.|/ld-linux|/libstdc\+\+|/libgcc_s|/libgomp' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
strip --strip-unneeded "$out"/lib/*.so* 2>/dev/null || true
du -sh "$out"
