#!/usr/bin/env bash
# Next GPU session, four calls back to back on one nvidia-h200 (idle release 30 s: start each call at once).
#   call 1: carry .whl .whl-helion .whl-quack/1 -> bash probe/next.sh c1   (~530 s)
#           installs; counters at 24's and 52's rows (24's designs now named); the GPU tests never finished (layer
#           norm's page checks, 04B's peers) and the compiled-model check of a bad class, on the GPU
#   call 2: carry .whl-quack/2                  -> bash probe/next.sh c2   (~560 s)
#           quack; a COLD build (caches empty), its log kept: each page's line now says how many modules it
#           compiled from source and how many Triton kernels it compiled, where the cold timed pass loses time
#   call 3: (nothing carried)                   -> bash probe/next.sh c3   (~330 s)
#           make clean, then a WARM build on the same machine: the front page for the closing note
#   call 4: (what is left)                      -> bash probe/next.sh c4 [seconds]
#           the GPU tests of the files the cross-entropy check touched, and every drop-in compiled (Inductor)
# After call 1: copy docs/counters.json back from $OUT and commit it. Keep build logs and sites (results/).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:/tmp/helion-site:/tmp/quack-site:/tmp/quack-site/nvidia_cutlass_dsl/dsl_packages
export HELION_AUTOTUNE_BENCHMARK_SUBPROCESS=0 PYTHONUNBUFFERED=1 SOL_HELION_CONFIGS=$PWD/docs/helion_configs.json
unset PYTHONDONTWRITEBYTECODE
scratch() {  # caches of their own, thrown away, and no bytecode written: the build of call 2 stays cold
    export TRITON_CACHE_DIR=/tmp/scratch/triton TORCHINDUCTOR_CACHE_DIR=/tmp/scratch/inductor
    export JAX_COMPILATION_CACHE_DIR=/tmp/scratch/jax QUACK_CACHE_DIR=/tmp/scratch/quack PYTHONDONTWRITEBYTECODE=1
}
keep() {  # $1: cold or warm
    mv "$OUT/build.log" "$OUT/build_$1.log"; mv "$OUT/site.tar.gz" "$OUT/site_$1.tar.gz"
    cp docs/_generated/landing_results.inc "$OUT/landing_$1.inc"
    (cd docs/_generated && tar czf "$OUT/results_$1.tgz" results)
}
case "$1" in
c1)
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/helion-site .whl-helion/*.whl
    bash dev/quack_install.sh
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    scratch
    timeout 330 python3 dev/counters.py --budget 300 --timeout 250 --work /tmp/w \
        24_layer_norm_backward_locks:bfloat16:4096 24_layer_norm_backward_locks:float32:2048 \
        52_rms_norm_mosaic_gpu_backward:bfloat16:8192 52_rms_norm_mosaic_gpu_backward:float32:24576 \
        > "$OUT/counters.log" 2>&1
    echo "counters rc $?"; grep -E "point\(s\)|left out|not run|FAILED|cut at|stored" "$OUT/counters.log"
    cp docs/counters.json "$OUT/"; mkdir -p "$OUT/pages" && cp /tmp/w/*.log "$OUT/pages/" 2>/dev/null
    timeout 170 python3 -m pytest -v -n 4 -p no:cacheprovider "tests/test_layer_norm.py::test_page_checks_passed" \
        "tests/test_rms_norm.py::test_missing_peers_are_named_with_their_reason" \
        tests/test_edges_cross_entropy.py -k "page_checks_passed or missing_peers or compiled_model" \
        > "$OUT/tests1.log" 2>&1
    echo "tests rc $?"; grep -cE " PASSED" "$OUT/tests1.log"; grep -E " (FAILED|ERROR)" "$OUT/tests1.log" | head
    rm -rf /tmp/scratch ;;
c2)
    bash dev/quack_install.sh
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 570 bash dev/gpu_build.sh > /dev/null 2>&1
    echo "build rc $?"; grep -E "^phase|GPU build:|^page " "$OUT/build.log" | cut -c1-240
    keep cold ;;
c3)
    make clean > /dev/null
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 400 bash dev/gpu_build.sh > /dev/null 2>&1
    echo "build rc $?"; grep -E "^phase|GPU build:|^page " "$OUT/build.log" | cut -c1-240
    keep warm ;;
c4)
    timeout "${2:-200}" python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_edges_cross_entropy.py \
        tests/test_cross_entropy.py tests/test_compiled_dropins.py > "$OUT/tests4.log" 2>&1
    echo "tests rc $?"; tail -3 "$OUT/tests4.log" ;;
esac
