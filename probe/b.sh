#!/usr/bin/env bash
# GPU calls back to back on one nvidia-h200 (idle release 30 s: start each call at once).
#   c1: carry .whl .whl-helion .whl-quack/1 -> installs (quack's first part); Helion's softmax forward re-tuned at
#       bfloat16 (caches of its own: the build after it stays cold), the file kept in /tmp for c2 and $OUT
#   c2: carry .whl-quack/2                  -> quack; c1's configs; a COLD build
#   c3: (nothing carried)                   -> make clean; a WARM build (SOL_TIMED_JOBS=${JOBS:-6}, SOL_YIELD=${YIELD:-0})
#   t:  GPU tests on the site c3 built (SOL_BUILT_SITE=$PWD/_build), ${WORKERS:-12} workers
#   Every call writes its output under $OUT (the tail of a long output is all that comes back otherwise).
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
case "$1" in
c1)
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/helion-site .whl-helion/*.whl
    bash dev/quack_install.sh; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    git log --oneline -1 | cat
    TRITON_CACHE_DIR=/tmp/probe-triton TORCHINDUCTOR_CACHE_DIR=/tmp/probe-inductor timeout 480 python3 dev/helion_tune.py \
        "softmax forward" --effort quick --force --dtypes bfloat16 > $OUT/tune_bf16.log 2>&1
    echo "tune rc $?"; grep "^softmax forward" $OUT/tune_bf16.log | cut -c1-60
    grep -o "configs tested)" $OUT/tune_bf16.log | wc -l
    cp docs/helion_configs.json /tmp/helion_configs.json; cp docs/helion_configs.json $OUT/ ;;
c2)
    bash dev/quack_install.sh
    cp /tmp/helion_configs.json docs/helion_configs.json
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 570 bash dev/gpu_build.sh > /dev/null 2>&1
    echo "build rc $?"; summary; keep cold ;;
c3)
    cp /tmp/helion_configs.json docs/helion_configs.json
    make clean > /dev/null
    SOL_YIELD=${YIELD:-0} SOL_TIMED_JOBS=${JOBS:-6} SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 560 \
        bash dev/gpu_build.sh > /dev/null 2>&1
    echo "build rc $?"; summary; keep warm${YIELD:+_yield} ;;
ts)  # the GPU tests of what changed, on the site c3 built
    SOL_BUILT_SITE=$PWD/_build timeout 500 python3 -m pytest tests/test_autotuning_deep_dive.py tests/test_helion.py \
        tests/test_landing.py -q -n 8 -p no:cacheprovider > $OUT/tests.log 2>&1
    echo "tests rc $?"; grep -v "^\.\.\.\." $OUT/tests.log | tail -15 ;;
t)
    SOL_BUILT_SITE=$PWD/_build timeout 570 python3 -m pytest tests -q -n ${WORKERS:-12} -p no:cacheprovider --durations=20 \
        --ignore=tests/test_site.py --ignore=tests/test_browser.py > $OUT/tests.log 2>&1
    echo "tests rc $?"; grep -v "^\.\.\.\." $OUT/tests.log | tail -30 ;;
esac
