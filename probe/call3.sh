#!/usr/bin/env bash
cd "$(dirname "$0")/.."
bash dev/quack_install.sh > $OUT/quack1.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /dev/null 2>&1 || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
start=$(date +%s)
timeout ${T62:-150} python3 probe/run62.py > $OUT/dd62.log 2>&1; echo "dd62 exit $? in $(( $(date +%s) - start )) s" >> $OUT/dd62.log
