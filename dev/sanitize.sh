#!/usr/bin/env bash
# Every kernel test under NVIDIA's compute-sanitizer, on a GPU: out-of-bounds and misaligned accesses
# (memcheck, the default), reads of uninitialized memory (initcheck), shared-memory races (racecheck).
# The tests call each kernel on small tensors, fallbacks forced. SOL_TESTS_UNTIMED=1 runs each page only up to
# the cell that defines its timer (tests/conftest.py): its kernels, configs, drop-ins and correctness checks,
# no benchmark (with the caching allocator off, a page's CUDA-graph captures cannot allocate: seen with deep
# dive 42's tests on an H100, 2026-11-25); a test needing a name from a later cell is skipped, saying which.
# dev/sanitize_sweep.py adds every drop-in at every row length, staged kernels included.
#
#   bash dev/sanitize.sh                          # memcheck over every kernel test
#   bash dev/sanitize.sh initcheck tests/test_rms_norm.py
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
export PYTORCH_NO_CUDA_MEMORY_CACHING=1 PYTHONUNBUFFERED=1 SOL_TESTS_UNTIMED=1
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
"$SANITIZER" --tool "$tool" --error-exitcode 99 --print-limit 20 \
    python3 -m pytest -q -x -p no:cacheprovider "${files[@]}"
