#!/usr/bin/env bash
# Next GPU session, calls back to back on one nvidia-h200 (idle release 30 s: start each call at once).
#   c1: carry .whl .whl-helion .whl-quack/1 -> bash probe/next.sh c1   installs (quack's first part)
#   c2: carry .whl-quack/2                  -> bash probe/next.sh c2   quack; a COLD build, pages taking turns on
#       the GPU by code block (4 at a time): its time, and its rows against the serial builds' (probe/light.py @ 5d32484)
#   c3: (nothing carried)                   -> bash probe/next.sh c3   make clean; a WARM build: the front page
#   c4 (if time): GPU tests (make test on the GPU, the site built)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:/tmp/helion-site:/tmp/quack-site:/tmp/quack-site/nvidia_cutlass_dsl/dsl_packages
export HELION_AUTOTUNE_BENCHMARK_SUBPROCESS=0 PYTHONUNBUFFERED=1 SOL_HELION_CONFIGS=$PWD/docs/helion_configs.json
unset PYTHONDONTWRITEBYTECODE
keep() {
    mv "$OUT/build.log" "$OUT/build_$1.log"; mv "$OUT/site.tar.gz" "$OUT/site_$1.tar.gz"
    (cd docs/_generated && tar czf "$OUT/results_$1.tgz" results)
}
summary() { grep -E "^phase|GPU build:|WARNING|^timed pass|removed|failed" "$OUT/build.log" | cut -c1-220; }
case "$1" in
c1)
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/helion-site .whl-helion/*.whl
    bash dev/quack_install.sh; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader ;;
c2)
    bash dev/quack_install.sh
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 560 bash dev/gpu_build.sh > /dev/null 2>&1
    echo "build rc $?"; summary; keep cold ;;
c3)
    make clean > /dev/null
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 500 bash dev/gpu_build.sh > /dev/null 2>&1
    echo "build rc $?"; summary; keep warm ;;
c4)
    timeout 560 python3 -m pytest tests -q -x -p no:cacheprovider --ignore=tests/test_site.py --ignore=tests/test_browser.py > $OUT/tests.log 2>&1
    echo "tests rc $?"; tail -5 $OUT/tests.log ;;
esac
