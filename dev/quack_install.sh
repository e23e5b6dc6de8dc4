#!/usr/bin/env bash
# On the lent GPU machine: gather quack's wheels from `dev/fetch_wheels.sh quack` over two calls of the device
# tool (carry .whl-quack/1 in one, .whl-quack/2 in the next, while the machine stays warm), then install them
# into /tmp/quack-site, where dev/gpu_build.sh and the pages find them. Run it in both calls:
#
#   bash dev/quack_install.sh && export PYTHONPATH=/tmp/quack-site:/tmp/quack-site/nvidia_cutlass_dsl/dsl_packages
#
# A --target install runs no .pth file: the CuTe DSL's packages go on PYTHONPATH by hand, as above.
set -euo pipefail
cd "$(dirname "$0")/.."
store=${SOL_QUACK_STORE:-$HOME/.sol-quack}  # survives between calls on a warm machine
mkdir -p "$store"
for d in .whl-quack/1 .whl-quack/2; do [ -d "$d" ] && cp "$d"/* "$store"/; done
if [ -f /tmp/quack-site/quack/__init__.py ]; then echo "quack: installed in /tmp/quack-site"; exit 0; fi
read -r name sha < "$store/MANIFEST"
parts=("$store"/part0*)
if [ ${#parts[@]} -lt 3 ]; then
    echo "quack: ${#parts[@]} of 3 parts of $name here; carry .whl-quack/2 (or /1) in the next call"
    exit 0
fi
cat "$store"/part00 "$store"/part01 "$store"/part02 > "$store/$name"
echo "$sha  $store/$name" | sha256sum -c --quiet || { echo "quack: $name does not match its sha256"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/quack-site "$store"/*.whl
echo "quack: installed in /tmp/quack-site"
