#!/usr/bin/env bash
# Next GPU session, three calls on one warm nvidia-h200 (idle release 30 s: start each call at once).
#   call 1: carry .whl .whl-helion .whl-quack/1   -> bash probe/next.sh tune
#   call 2: carry .whl-quack/2                    -> bash probe/next.sh counters
#   (here: copy docs/helion_configs.json and docs/counters.json back from $OUT, commit)
#   call 3: (nothing carried)                     -> bash probe/next.sh build
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:/tmp/helion-site:/tmp/quack-site:/tmp/quack-site/nvidia_cutlass_dsl/dsl_packages
export HELION_AUTOTUNE_BENCHMARK_SUBPROCESS=0 PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
scratch() {  # caches of their own, thrown away: the build of call 3 stays cold
    export TRITON_CACHE_DIR=/tmp/scratch/triton TORCHINDUCTOR_CACHE_DIR=/tmp/scratch/inductor
    export JAX_COMPILATION_CACHE_DIR=/tmp/scratch/jax QUACK_CACHE_DIR=/tmp/scratch/quack
}
case "$1" in
tune)
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/helion-site .whl-helion/*.whl
    bash dev/quack_install.sh
    scratch
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    # the points inside each page's RANGE: 04B's first (none of its bf16 is tuned), then 02B at 4 K and 8 K and 06;
    # then 02's 16 K. A run that stores no config records why (docs/helion_configs.json: untuned)
    inside="512 1024 2048 4096 8192 32000 50304 128256 151936 262144"
    timeout 200 python3 dev/helion_tune.py "rms_norm backward" --effort quick --seconds 25 --budget 150 --n $inside \
        2>&1 | grep -E "^(rms|layer|cross|budget|/)" | tail -12
    timeout 140 python3 dev/helion_tune.py "layer_norm backward" "cross_entropy forward" --effort quick --seconds 25 \
        --budget 95 --n $inside 2>&1 | grep -E "^(rms|layer|cross|budget|/)" | tail -12
    timeout 45 python3 dev/helion_tune.py "layer_norm forward" --effort quick --seconds 25 --n 16384 2>&1 | tail -2
    cp docs/helion_configs.json "$OUT/"
    # the GPU tests that the last full run left unrun at its caps, and the tool's tests
    timeout 150 python3 -m pytest -q -n 6 -p no:cacheprovider --durations=10 tests/test_helion.py \
        "tests/test_layer_norm.py::test_page_checks_passed" \
        "tests/test_rms_norm.py::test_tutorial_checked_and_measured" \
        "tests/test_rms_norm.py::test_compiled_block_keeps_the_drop_in" \
        "tests/test_rms_norm.py::test_missing_peers_are_named_with_their_reason" \
        "tests/test_cross_entropy.py::test_the_forwards_light_reads_every_word" \
        "tests/test_cross_entropy.py::test_operators_pass_opcheck" \
        "tests/test_softmax.py::test_operators_pass_opcheck" tests/test_autotuning_deep_dive.py tests/test_landing.py \
        -k "not built_site and not this_build and not execution_times and not recommends_a_page_for_every" \
        > "$OUT/tests.log" 2>&1
    echo "tests rc $?"; tail -5 "$OUT/tests.log"
    rm -rf /tmp/scratch ;;
counters)
    bash dev/quack_install.sh
    scratch
    # first the rows of the front page that miss with no counters at all, then the core rows again with every peer
    # (the stored ones lack Liger, quack and Helion; 01B's and 02B's past 8 K are of older code)
    timeout 260 python3 dev/counters.py --budget 200 --work /tmp/w \
        01_fused_softmax:float32:1024 05_jax_rms_norm:float32:4096 05_jax_rms_norm:float32:32768 \
        05_jax_rms_norm:bfloat16:32768 05_jax_rms_norm_backward:float32:32768 \
        05_jax_rms_norm_backward:bfloat16:32768 24_layer_norm_backward_locks:bfloat16:4096 \
        51_rms_norm_mosaic_gpu:bfloat16:24576 52_rms_norm_mosaic_gpu_backward:bfloat16:8192 \
        52_rms_norm_mosaic_gpu_backward:float32:24576 > "$OUT/counters.log" 2>&1
    timeout 270 python3 dev/counters.py --budget 210 --work /tmp/w \
        01_softmax_backward:bfloat16:16384 01_softmax_backward:bfloat16:32768 \
        02_layer_norm_backward:bfloat16:512 02_layer_norm_backward:float32:8192 \
        02_layer_norm_backward:bfloat16:16384 02_layer_norm_backward:float32:16384 \
        04_rms_norm:float32:4096 04_rms_norm:bfloat16:32768 04_rms_norm:bfloat16:65536 \
        06_cross_entropy:bfloat16:32000 06_cross_entropy:float32:50304 01_fused_softmax:bfloat16:512 \
        02_layer_norm:bfloat16:2048 02_layer_norm:float32:16384 02_layer_norm:float32:65536 \
        04_rms_norm_backward:bfloat16:2048 04_rms_norm_operator:float32:512 >> "$OUT/counters.log" 2>&1
    echo "counters rc $?"; grep -E "point\(s\)|FAILED|not run|stored" "$OUT/counters.log"
    cp docs/counters.json "$OUT/"
    rm -rf /tmp/scratch ;;
build)
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 560 bash dev/gpu_build.sh > "$OUT/stdout.log" 2>&1
    echo "build rc $?"; tail -2 "$OUT/build.log"
    cp docs/_generated/landing_results.inc "$OUT/"
    (cd docs/_generated && tar czf "$OUT/results.tgz" results) ;;
esac
