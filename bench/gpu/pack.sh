#!/usr/bin/env bash
# Packs the pip-flavour (CUDA) binaries, the services and mlcdctl, and the Debian shared
# libraries they need but a GPU machine's image lacks, into one folder for a GPU machine that
# has the same torch wheel (bench/RESULTS.md "GPU step"). libtorch, CUDA and NCCL come from
# that machine's torch. The libraries travel as one xz archive (lib.tar.xz, ~17 MB instead of
# ~57 MB), unpacked there by bench/gpu/unpack.sh, so the whole folder stays far under the
# device tool's 64 MiB.
#   bench/gpu/pack.sh build-torch2 .devbin
# A binary missing from the pip-flavour build that needs no torch (the services, mlcdctl) is
# taken from the Debian build (MLCD_PACK_FALLBACK, default build): it is the same code.
set -euo pipefail
shopt -s nullglob  # a pack with no worker_* test binaries
build=${1:-build-torch2}
out=${2:-.devbin}
fallback=${MLCD_PACK_FALLBACK:-build}
rm -rf "$out"
mkdir -p "$out/lib"
torch_bins=(mlcd-worker worker_step_bench worker_vit_bench bench_worker_loss worker_train_step_test
            worker_vit_test worker_partial_fc_test worker_collectives_test ${MLCD_PACK_EXTRA:-})
plain_bins=(mlcdctl mlcd-coordinator mlcd-labelstore mlcd-clusterd)
for b in "${torch_bins[@]}"; do
  if [ -x "$build/bin/$b" ]; then strip -o "$out/$b" "$build/bin/$b"; else echo "pack: no $build/bin/$b" >&2; fi
done
for b in "${plain_bins[@]}"; do
  src="$build/bin/$b"
  [ -x "$src" ] || src="$fallback/bin/$b"
  if ldd "$src" | grep -q libtorch; then echo "pack: $src links libtorch; build it in $build" >&2; exit 1; fi
  strip -o "$out/$b" "$src"
done
# Everything ldd resolves outside the torch wheel and glibc / the C++ runtime.
for b in "$out"/mlcd* "$out"/worker_*; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E 'site-packages|/libc\.so|/libm\.so|/libpthread|/libdl\.|/librt\.|/ld-linux|/libstdc\+\+|/libgcc_s|/libgomp|/libtorch|/libc10' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
strip --strip-unneeded "$out"/lib/*.so* 2>/dev/null || true
du -sh "$out/lib"
tar -C "$out" -cJf "$out/lib.tar.xz" lib
rm -rf "$out/lib"
du -sh "$out"
