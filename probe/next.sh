#!/usr/bin/env bash
# GPU calls back to back on one nvidia-h200 (idle release 30 s: start each call at once).
#   c1: carry .whl .whl-helion .whl-quack/1 -> installs (quack's first part)
#   c2: carry .whl-quack/2                  -> quack; a COLD build (4 pages at a time, pages ahead across folders, -j auto)
#   c3: (nothing carried)                   -> make clean; a WARM build with SOL_TIMED_JOBS=${JOBS:-6}
#   t1/t2: GPU tests, two halves of the files (the whole suite with -n 4 took 344 s: one call does)
#   p4 [ln_bwd|ce_fwd]: launch sweeps of 02 backward and 06's loss alone where the front page misses
#   p3: python3 probe/p3.py (06's loss and gradient, a whole row in registers against the page's kernel)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:/tmp/helion-site:/tmp/quack-site:/tmp/quack-site/nvidia_cutlass_dsl/dsl_packages
export HELION_AUTOTUNE_BENCHMARK_SUBPROCESS=0 PYTHONUNBUFFERED=1 SOL_HELION_CONFIGS=$PWD/docs/helion_configs.json
unset PYTHONDONTWRITEBYTECODE
keep() {
    mv "$OUT/build.log" "$OUT/build_$1.log"; mv "$OUT/site.tar.gz" "$OUT/site_$1.tar.gz"
    (cd docs/_generated && tar czf "$OUT/results_$1.tgz" results)
}
summary() { grep -E "^phase|GPU build:|WARNING|^timed pass|removed|failed|^build:" "$OUT/build.log" | cut -c1-220; }
half() {  # the test files, every other one by size (largest first): t1 the odd ones, t2 the even ones
    ls -S tests/test_*.py | grep -v -E "test_site|test_browser" | awk -v h="$1" 'NR % 2 == h % 2'
}
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
    SOL_TIMED_JOBS=${JOBS:-6} SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 540 bash dev/gpu_build.sh > /dev/null 2>&1
    echo "build rc $?"; summary; keep warm ;;
t1|t2)
    timeout 560 python3 -m pytest $(half "${1#t}") -q -n 4 -p no:cacheprovider > $OUT/tests_$1.log 2>&1
    echo "tests rc $?"; tail -15 $OUT/tests_$1.log ;;
p3)
    timeout 300 python3 probe/p3.py 2>&1 | grep -v Warning ;;
p4)
    timeout 560 python3 probe/p4.py ${2:-} 2>&1 | grep -v Warning ;;
esac
