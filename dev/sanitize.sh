#!/usr/bin/env bash
# Every kernel test under NVIDIA's compute-sanitizer, on a GPU: out-of-bounds and misaligned accesses
# (memcheck, the default), shared-memory races (racecheck: the Gluon staged kernels), reads of
# uninitialized memory (initcheck). The tests call each kernel on small tensors, fallbacks forced.
#
#   bash dev/sanitize.sh                          # memcheck over every kernel test
#   bash dev/sanitize.sh racecheck tests/test_softmax_staged.py tests/test_layer_norm_staged.py tests/test_rms_norm_staged.py
#
# PyTorch's caching allocator would hide an overrun inside its pooled blocks: it is turned off here.
set -euo pipefail
cd "$(dirname "$0")/.."
tool=${1:-memcheck}
shift || true
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    files=($(ls tests/test_*.py | grep -v -e test_site.py -e test_browser.py))
fi
export PYTORCH_NO_CUDA_MEMORY_CACHING=1 PYTHONUNBUFFERED=1
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
"$SANITIZER" --tool "$tool" --error-exitcode 99 --print-limit 20 \
    python3 -m pytest -q -x -p no:cacheprovider "${files[@]}"
