#!/usr/bin/env bash
# GPU calls back to back on one nvidia-h200 (idle release 30 s: start each call at once).
#   c1: carry .whl .whl-helion .whl-quack/1 -> installs (quack's first part)
#   c2: carry .whl-quack/2                  -> quack; a COLD build (TRACE=1: the GPU turn's trace, probe/trace.patch)
#   c3: (nothing carried)                   -> make clean; a WARM build
#   t:  GPU tests on the site the last build made (SOL_BUILT_SITE=$PWD/_build), ${WORKERS:-12} workers
#   Every call writes its output under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:/tmp/helion-site:/tmp/quack-site:/tmp/quack-site/nvidia_cutlass_dsl/dsl_packages
export HELION_AUTOTUNE_BENCHMARK_SUBPROCESS=0 PYTHONUNBUFFERED=1 SOL_HELION_CONFIGS=$PWD/docs/helion_configs.json
unset PYTHONDONTWRITEBYTECODE
stamp=${TRITON_CACHE_DIR:-$HOME/.triton/cache}/sol-warm-up
keep() {
    mv "$OUT/build.log" "$OUT/build_$1.log"; mv "$OUT/site.tar.gz" "$OUT/site_$1.tar.gz"
    (cd docs/_generated && tar czf "$OUT/results_$1.tgz" results)
    cp "$stamp"/*seconds.json "$OUT/" 2>/dev/null
}
summary() { grep -E "^phase|GPU build:|WARNING|^timed pass|removed|failed|^build:|^warm-up: .* compiled" "$OUT/build.log" | cut -c1-200; }
case "$1" in
c1)
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/helion-site .whl-helion/*.whl
    bash dev/quack_install.sh; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    nproc; git log --oneline -1 | cat ;;
c2)
    bash dev/quack_install.sh
    if [ "${TRACE:-0}" = 1 ]; then git apply probe/trace.patch && export SOL_TURN_TRACE=/tmp/trace; fi
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 560 bash dev/gpu_build.sh > /dev/null 2>&1
    echo "build rc $?"; summary; keep cold
    if [ "${TRACE:-0}" = 1 ]; then tar czf "$OUT/trace_cold.tgz" -C /tmp trace; git apply -R probe/trace.patch; fi ;;
c3)
    make clean > /dev/null
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 560 bash dev/gpu_build.sh > /dev/null 2>&1
    echo "build rc $?"; summary; keep warm ;;
ts)  # the GPU tests of what changed since round A, on the site the last build made
    SOL_BUILT_SITE=$PWD/_build timeout 400 python3 -m pytest tests/test_build.py tests/test_jax_rms_norm.py \
        tests/test_landing.py -q -n 12 -p no:cacheprovider > $OUT/tests.log 2>&1
    echo "tests rc $?"; grep -v "^\.\.\.\." $OUT/tests.log | tail -15 ;;
t)
    SOL_BUILT_SITE=$PWD/_build timeout 570 python3 -m pytest tests -q -n ${WORKERS:-12} -p no:cacheprovider --durations=20 \
        --ignore=tests/test_site.py --ignore=tests/test_browser.py > $OUT/tests.log 2>&1
    echo "tests rc $?"; grep -v "^\.\.\.\." $OUT/tests.log | tail -30 ;;
esac
