#!/usr/bin/env bash
# Machine A (one call): installs, do_bench's budget A/B, page 01's short-row launches, Helion's softmax forward
# re-tuned (its search's seconds and size stored), with caches of their own (a later build on this machine stays cold).
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/helion-site .whl-helion/*.whl
export PYTHONPATH=/tmp/site:/tmp/helion-site HELION_AUTOTUNE_BENCHMARK_SUBPROCESS=0 PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=/tmp/probe-triton TORCHINDUCTOR_CACHE_DIR=/tmp/probe-inductor
unset PYTHONDONTWRITEBYTECODE
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
git log --oneline -1 | cat
timeout 150 python3 probe/bench_budget.py 8 2>&1 | tee $OUT/bench_budget.log
timeout 120 python3 probe/small_n.py 2>&1 | tee $OUT/small_n.log
timeout 300 python3 dev/helion_tune.py "softmax forward" --effort quick --force > $OUT/tune.log 2>&1
echo "tune rc $?"; grep -v "^\[" $OUT/tune.log | cut -c1-150 | tail -20
cp docs/helion_configs.json $OUT/
