#!/usr/bin/env bash
# tr: a cold build of the core pages (01-06) with the GPU turn's trace (SOL_TURN_TRACE), then where the pass went
set -uo pipefail
cd "$(dirname "$0")/.."
export SOL_TURN_TRACE=/tmp/trace SOL_HELION_AUTOTUNE=0 GPU_TESTS=0 SOL_HELION_CONFIGS=$PWD/docs/helion_configs.json
OUT=$OUT timeout ${LIMIT:-330} bash dev/gpu_build.sh '0[1-6]_' > /dev/null 2>&1
echo "build rc $?"; grep -E "^phase|GPU build|^timed pass" $OUT/build.log | cut -c1-200
grep "^page " $OUT/build.log | cut -c1-330
rm -f $OUT/site.tar.gz; tar czf $OUT/trace.tgz -C /tmp trace
python3 probe/turns.py /tmp/trace
