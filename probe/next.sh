#!/usr/bin/env bash
# Next GPU session, three calls back to back on one nvidia-h200 (idle release 30 s: start each call at once).
#   call 1: carry .whl .whl-helion .whl-quack/1 -> bash probe/next.sh c1   (~450 s)
#           installs; Helion's untuned points (dev/helion_tune.py, quick, a longer search than the 25-40 s that kept
#           Helion's default at 02B/04B 4 K): cross-entropy forward bf16 151,936 and 262,144, fp32 128,256; layer-norm
#           and RMSNorm backward 2-8 K. Copy $OUT/helion_configs.json into docs/ at once (call 2 builds with it).
#   call 2: carry .whl-quack/2                  -> bash probe/next.sh c2   (~480 s)
#           quack; a COLD build: its warm-up now removes Inductor's autotuning picks it timed beside 15 other pages
#           (the log's "warm-up: N of Inductor's autotuning picks ... removed"); the timed pass times them alone:
#           what that costs is each page's time against 6e7c275's cold build (pages 283 s), and torch.compile's
#           columns against that build's
#   call 3: (nothing carried)                   -> bash probe/next.sh c3   (~380 s)
#           make clean, then a WARM build on the same machine (its picks are the timed pass's, kept): the front
#           page for the closing note
# Keep build logs and sites. Then give the machine back.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:/tmp/helion-site:/tmp/quack-site:/tmp/quack-site/nvidia_cutlass_dsl/dsl_packages
export HELION_AUTOTUNE_BENCHMARK_SUBPROCESS=0 PYTHONUNBUFFERED=1 SOL_HELION_CONFIGS=$PWD/docs/helion_configs.json
unset PYTHONDONTWRITEBYTECODE
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
    timeout 200 python3 dev/helion_tune.py cross_entropy --effort quick --seconds 45 --budget 150 \
        > "$OUT/tune_ce.log" 2>&1; echo "tune ce rc $?"; grep -E "x[0-9]+: |budget spent|configs for" "$OUT/tune_ce.log" | cut -c1-200
    timeout 230 python3 dev/helion_tune.py "layer_norm backward" "rms_norm backward" --effort quick --seconds 60 --budget 160 --n 2048 4096 8192 \
        > "$OUT/tune_bwd.log" 2>&1; echo "tune bwd rc $?"; grep -E "x[0-9]+: |budget spent|configs for" "$OUT/tune_bwd.log" | cut -c1-200
    cp docs/helion_configs.json "$OUT/" ;;
c2)
    bash dev/quack_install.sh
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 570 bash dev/gpu_build.sh > /dev/null 2>&1
    echo "build rc $?"; grep -E "^phase|GPU build:|said:|autotuning picks" "$OUT/build.log" | cut -c1-240
    grep -E "^page " "$OUT/build.log" | sed -E 's/^page ([^:]+): ([0-9.]+) s.*timers ([0-9.]+) s.*/\1 \2 s, timers \3 s/'
    keep cold ;;
c3)
    make clean > /dev/null
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 420 bash dev/gpu_build.sh > /dev/null 2>&1
    echo "build rc $?"; grep -E "^phase|GPU build:|^page " "$OUT/build.log" | cut -c1-200
    keep warm ;;
esac
