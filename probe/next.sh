#!/usr/bin/env bash
# GPU calls back to back on one nvidia-h200 (idle release 30 s: start each call at once).
#   c1: carry .whl .whl-helion .whl-quack/1: installs; Helion's untuned points (dev/helion_tune.py); copy
#       $OUT/helion_configs.json into docs/ at once (c2 builds with it)
#   c2: carry .whl-quack/2: quack; a COLD build, the timed pass 4 pages at a time (SOL_TIMED_JOBS default)
#   c3: make clean, a WARM build, 4 at a time: the front page
#   c4: make clean, a WARM build of 01, 02, 04 only, one page at a time (SOL_TIMED_JOBS=1): the same rows timed alone
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
    echo "build rc $?"; grep -E "^phase|GPU build:|said:|autotuning picks|^timed pass" "$OUT/build.log" | cut -c1-240
    grep -E "^page " "$OUT/build.log" | cut -c1-200
    keep cold ;;
c3)
    make clean > /dev/null
    SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 420 bash dev/gpu_build.sh > /dev/null 2>&1
    echo "build rc $?"; grep -E "^phase|GPU build:|^page |^timed pass" "$OUT/build.log" | cut -c1-260
    keep warm ;;
c4)
    make clean > /dev/null
    SOL_TIMED_JOBS=1 SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 OUT=$OUT timeout 300 bash dev/gpu_build.sh "0[124]_" > /dev/null 2>&1
    echo "build rc $?"; grep -E "^phase|GPU build:|^page |^timed pass" "$OUT/build.log" | cut -c1-200
    keep serial ;;
esac
