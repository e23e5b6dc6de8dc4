#!/usr/bin/env bash
# Build the whole site on a GPU machine that reaches no package registry, then run the kernel tests on
# that GPU. Run from anywhere; the wheels that dev/fetch_wheels.sh put in .whl/ are installed first.
#
#   bash dev/gpu_build.sh            # every page
#   bash dev/gpu_build.sh 12         # only pages whose file name matches 12 (the others render unrun)
#   GPU_TESTS=0 bash dev/gpu_build.sh   # the build only
#   SOL_HELION_AUTOTUNE=0 bash dev/gpu_build.sh   # Helion only at its stored configs: no autotuning
#
# Writes into $OUT (or /tmp/sol-out): build.log (ending with the build's wall time), site.tar.gz (the
# built html: tar xzf site.tar.gz, open html/index.html), warm-up-seconds.json (where pages warmed up) and, unless
# GPU_TESTS=0, tests.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/sol-out}
mkdir -p "$out"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -d /tmp/quack-site ]; then  # quack, where dev/quack_install.sh put it (the lent GPU machine)
    export PYTHONPATH=/tmp/quack-site:/tmp/quack-site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -d .whl-helion ]; then  # Helion, where carried (bash dev/fetch_wheels.sh helion): the pages' Helion peer
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/helion-site .whl-helion/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/helion-site${PYTHONPATH:+:$PYTHONPATH}
    # its autotuner's benchmarks in a subprocess of their own do not run on the lent GPU machine
    export HELION_AUTOTUNE_BENCHMARK_SUBPROCESS=0
fi
export PYTHONUNBUFFERED=1
# Python's own cache: where bytecode writing is off (PYTHONDONTWRITEBYTECODE, as on the lent GPU machine, whose
# packages carry no .pyc), every process compiles every module it imports from source. There, torch and what the
# build pre-imports took 22.9 s to import, 10.7 s with bytecode; and again in each warm-up and test process.
unset PYTHONDONTWRITEBYTECODE
# JAX (tutorial 05) keeps compiled programs only where told: a second build on the same machine reuses them
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$HOME/.cache/sol-jax} JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
start=$(date +%s)
make html PYTHON=python3 TUTORIAL="${1:-}" 2>&1 | tee "$out/build.log"
status=$?
echo "GPU build: $(( $(date +%s) - start )) s, exit $status" | tee -a "$out/build.log"
tar czf "$out/site.tar.gz" -C _build html
# each page's warm-up seconds (a build that warmed up writes them): docs/warm-up-seconds.json orders a fresh machine's
cp "${TRITON_CACHE_DIR:-$HOME/.triton/cache}/sol-warm-up/warm-up-seconds.json" "$out/" 2>/dev/null
if [ "${GPU_TESTS:-1}" != 0 ]; then
    # the kernel tests, on the GPU (the site and browser tests belong to the CPU CI), on the site just built: without
    # SOL_BUILT_SITE the notebook tests build the whole site again, cold on a fresh machine, beside the other tests
    SOL_BUILT_SITE=$PWD/_build python3 -m pytest tests -q -x -n auto -p no:cacheprovider --ignore=tests/test_site.py \
        --ignore=tests/test_browser.py \
        2>&1 | tee "$out/tests.log"
    status=$(( status || $? ))
fi
exit $status
