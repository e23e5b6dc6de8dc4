#!/usr/bin/env bash
# Next GPU session, three calls back to back on one nvidia-h200 (idle release 30 s: start each call at once).
#   call 1: carry .whl .whl-helion .whl-quack/1 -> bash probe/next.sh c1   (~400 s)
#           installs; probe/next.py: 01B's fused backward at 2-16 K, the page's launch against 4-32 warps and 2-4
#           rows a program, and 02's forward at 8-16 K, 8-32 warps with and without the L2 hint (3 interleaved
#           rounds), registers (and programs an SM) of each; then counters at 01B fp32 32 K again (copy
#           $OUT/counters.json into docs/ if its ours runs the page's streamed kernel)
#   call 2: carry .whl-quack/2                  -> bash probe/next.sh c2   (~500 s)
#           quack; a COLD build: conf.py now names TRITON_CACHE_DIR before any page runs, and each page's log line
#           names the kernels it compiled slowly with what its warm-up compiled of them; the cold timed pass lost
#           72 s to Triton compiles at 7fbb51c (02 alone: its own kernels, 0.4 s each)
#   call 3: (nothing carried)                   -> bash probe/next.sh c3   (~300 s)
#           make clean, then a WARM build on the same machine: the front page for the closing note; then 02B and 01
#           under cProfile (dev/profile_pages.py), where a warm page's time goes outside its timers
# Keep build logs and sites. Then give the machine back.
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
    ROUNDS=3 timeout 240 python3 probe/next.py > "$OUT/next.log" 2>&1
    echo "probe rc $?"; grep '^{' "$OUT/next.log"
    # 01B fp32 32 K again: its stored ours ran torch's kernels under the profiler (removed); the log flags a repeat
    timeout 150 python3 dev/counters.py --budget 140 --timeout 130 --work /tmp/w3 01_softmax_backward:float32:32768 \
        > "$OUT/counters01b.log" 2>&1; echo "counters rc $?"; tail -4 "$OUT/counters01b.log"
    cp docs/counters.json "$OUT/"
    rm -rf /tmp/scratch ;;
c2)
    bash dev/quack_install.sh
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 570 bash dev/gpu_build.sh > /dev/null 2>&1
    echo "build rc $?"; grep -E "^phase|GPU build:|said:" "$OUT/build.log" | cut -c1-240
    grep -E "^page " "$OUT/build.log" | sed -E 's/^page ([^:]+): ([0-9.]+) s.*(Triton compiles.*)/\1 \2 s; \3/' | cut -c1-400
    keep cold ;;
c3)
    make clean > /dev/null
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 400 bash dev/gpu_build.sh > /dev/null 2>&1
    echo "build rc $?"; grep -E "^phase|GPU build:|^page " "$OUT/build.log" | cut -c1-240
    keep warm
    # where a warm page's time goes outside its timers (241 s of pages, 60 s of them timing, at 3989c09)
    SOL_CPROFILE=60 timeout 150 python3 dev/profile_pages.py 02_layer_norm_backward 01_fused_softmax \
        > "$OUT/cprofile.log" 2>&1; echo "cprofile rc $?" ;;
esac
