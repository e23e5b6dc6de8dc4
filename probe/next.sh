#!/usr/bin/env bash
# Next GPU session, four calls back to back on one nvidia-h200 (idle release 30 s: start each call at once).
#   call 1: carry .whl .whl-helion .whl-quack/1 -> bash probe/next.sh testsA   (~520 s: probe/next74.py, then tests)
#   call 2: carry .whl-quack/2                  -> bash probe/next.sh cold     (~480 s)
#   call 3: (nothing carried)                   -> bash probe/next.sh warm     (~560 s; then copy docs/counters.json
#                                                   back from $OUT and commit it)
#   call 4: (what budget is left)               -> bash probe/next.sh testsB
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:/tmp/helion-site:/tmp/quack-site:/tmp/quack-site/nvidia_cutlass_dsl/dsl_packages
export HELION_AUTOTUNE_BENCHMARK_SUBPROCESS=0 PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
scratch() {  # caches of their own, thrown away: the build of call 2 stays cold
    export TRITON_CACHE_DIR=/tmp/scratch/triton TORCHINDUCTOR_CACHE_DIR=/tmp/scratch/inductor
    export JAX_COMPILATION_CACHE_DIR=/tmp/scratch/jax QUACK_CACHE_DIR=/tmp/scratch/quack
}
A="tests/test_softmax.py tests/test_softmax_long_rows.py tests/test_softmax_staged.py tests/test_layer_norm.py
   tests/test_layer_norm_backward_locks.py tests/test_layer_norm_deep_dives.py tests/test_layer_norm_staged.py
   tests/test_rms_norm.py tests/test_rms_norm_staged.py tests/test_rms_norm_wide_backward.py"
case "$1" in
testsA)
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/helion-site .whl-helion/*.whl
    bash dev/quack_install.sh
    scratch
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    timeout 100 python3 probe/next74.py > "$OUT/next74.log" 2>&1; echo "next74 rc $?"
    timeout 390 python3 -m pytest -v -n 8 -p no:cacheprovider $A > "$OUT/testsA.log" 2>&1
    echo "tests A rc $?"; grep -cE " PASSED" "$OUT/testsA.log"; grep -E " (FAILED|ERROR)" "$OUT/testsA.log" | head
    rm -rf /tmp/scratch ;;
cold)
    bash dev/quack_install.sh
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 560 bash dev/gpu_build.sh > "$OUT/stdout.log" 2>&1
    echo "build rc $?"; tail -1 "$OUT/build.log"
    cp docs/_generated/landing_results.inc "$OUT/"
    (cd docs/_generated && tar czf "$OUT/results.tgz" results) ;;
warm)
    make clean > /dev/null
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 330 bash dev/gpu_build.sh > "$OUT/stdout.log" 2>&1
    echo "build rc $?"; tail -1 "$OUT/build.log"
    cp docs/_generated/landing_results.inc "$OUT/landing_warm.inc"
    (cd docs/_generated && tar czf "$OUT/results_warm.tgz" results)
    rm -f "$OUT/site.tar.gz"
    # the rows with no counters yet, and the points where Helion or quack beat ours with none of theirs counted
    timeout 215 python3 dev/counters.py --budget 150 --work /tmp/w \
        02_layer_norm_backward:bfloat16:512 06_cross_entropy:float32:50304 02_layer_norm:bfloat16:16384 \
        24_layer_norm_backward_locks:bfloat16:4096 52_rms_norm_mosaic_gpu_backward:bfloat16:8192 \
        52_rms_norm_mosaic_gpu_backward:float32:8192 51_rms_norm_mosaic_gpu:bfloat16:32768 \
        05_jax_rms_norm_backward:bfloat16:32768 05_jax_rms_norm_backward:float32:32768 > "$OUT/counters.log" 2>&1
    echo "counters rc $?"; grep -E "point\(s\)|left out|not run|stored" "$OUT/counters.log"
    cp docs/counters.json "$OUT/" ;;
testsB)
    B=$(ls tests/test_*.py | grep -vE "test_(site|browser)\.py" | grep -vxF -f <(tr ' ' '\n' <<< "$A" | grep .))
    timeout "${2:-400}" python3 -m pytest -v -n 8 -p no:cacheprovider $B > "$OUT/testsB.log" 2>&1
    echo "tests B rc $?"; grep -cE " PASSED" "$OUT/testsB.log"; grep -E " (FAILED|ERROR)" "$OUT/testsB.log" | head ;;
esac
