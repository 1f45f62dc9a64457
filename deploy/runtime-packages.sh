#!/usr/bin/env bash
# Prints the Debian packages that own the shared libraries the given executables link
# directly (their DT_NEEDED entries), one per line, sorted and unique: what dpkg-shlibdeps
# computes for a .deb. The container build (deploy/Dockerfile) installs exactly these in the
# runtime stage, and apt pulls in their own dependencies. Fails, naming the library, when a
# library cannot be resolved or belongs to no package.
#
#   deploy/runtime-packages.sh build/bin/mlcd-coordinator build/bin/mlcd-worker ...
#   deploy/runtime-packages.sh --shipped-under DIR EXE...   # libraries under DIR (the torch
#                                                           # wheel of the CUDA image) are
#                                                           # copied, not installed: skipped
set -euo pipefail

shipped_under=""
if [ "${1:-}" = --shipped-under ]; then
  shipped_under=${2:?--shipped-under needs a directory}
  shift 2
fi

if [ $# -eq 0 ]; then
  echo "usage: $0 EXECUTABLE..." >&2
  exit 2
fi

# lib name -> resolved path, over all executables.
declare -A path_of needed_by
for exe in "$@"; do
  [ -x "$exe" ] || { echo "runtime-packages: $exe is not an executable file" >&2; exit 1; }
  ldd_out=$(ldd "$exe")
  while read -r lib; do
    [ -n "${path_of[$lib]:-}" ] && continue
    # awk reads all its input (no early exit): an early exit can kill the writer with SIGPIPE,
    # which pipefail and set -e turn into a silent failure of the whole script.
    path=$(printf '%s\n' "$ldd_out" | awk -v lib="$lib" '!found && $1 == lib && $2 == "=>" {print $3; found = 1}')
    if [ -z "$path" ] || [ "$path" = "not" ]; then
      echo "runtime-packages: $exe needs $lib, which the dynamic linker cannot find" >&2
      exit 1
    fi
    if [ -n "$shipped_under" ] && [[ "$(readlink -f "$path")" == "$(readlink -f "$shipped_under")"/* ]]; then
      continue
    fi
    path_of[$lib]=$path
    needed_by[$lib]=$exe
  done < <(readelf -d "$exe" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done

# With merged /usr a file may be registered under /lib or /usr/lib, by its own name or by the
# name of the symlink that points at it: ask dpkg about every variant at once.
candidates=()
for lib in "${!path_of[@]}"; do
  for p in "${path_of[$lib]}" "$(readlink -f "${path_of[$lib]}")"; do
    candidates+=("$p" "${p#/usr}" "/usr${p}")
  done
done
owners=$(dpkg-query -S "${candidates[@]}" 2>/dev/null || true)

packages=()
for lib in "${!path_of[@]}"; do
  pkg=""
  for p in "${path_of[$lib]}" "$(readlink -f "${path_of[$lib]}")"; do
    for variant in "$p" "${p#/usr}" "/usr${p}"; do
      pkg=$(printf '%s\n' "$owners" | awk -v f="$variant" '!found { i = index($0, ": "); if (substr($0, i + 2) == f) { split($0, a, ":"); print a[1]; found = 1 } }')
      [ -n "$pkg" ] && break 2
    done
  done
  if [ -z "$pkg" ]; then
    echo "runtime-packages: $lib (${path_of[$lib]}, needed by ${needed_by[$lib]}) belongs to no Debian package" >&2
    exit 1
  fi
  packages+=("$pkg")
done
printf '%s\n' "${packages[@]}" | sort -u
