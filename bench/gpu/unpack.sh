#!/usr/bin/env bash
# On the GPU machine: unpacks bench/gpu/pack.sh's library archive in place (once) and prints
# the LD_LIBRARY_PATH to use (the torch wheel's lib folder first, then the packed libraries).
#   export LD_LIBRARY_PATH=$(bench/gpu/unpack.sh .devbin)
set -euo pipefail
bin=$(cd "${1:-.devbin}" && pwd)
if [ ! -d "$bin/lib" ] && [ -f "$bin/lib.tar.xz" ]; then
  tar -C "$bin" -xJf "$bin/lib.tar.xz"
fi
torch_lib=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__) + "/lib")')
echo "$torch_lib:$bin/lib"
