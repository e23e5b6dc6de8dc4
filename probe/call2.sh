#!/usr/bin/env bash
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/helion-site .whl-helion/*.whl || exit 1
export PYTHONUNBUFFERED=1 HELION_AUTOTUNE_BENCHMARK_SUBPROCESS=0
cp docs/helion_configs.json /tmp/a.json; cp docs/helion_configs.json /tmp/b.json
T=dev/helion_tune.py; O="--effort quick --seconds ${S:-40}"
(CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/helion-site:/tmp/site timeout 480 python3 $T "layer_norm backward" --dtypes float32 $O --budget ${B:-380} --store /tmp/a.json > $OUT/tune0.log 2>&1) &
(CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/helion-site:/tmp/site timeout 480 python3 $T "layer_norm backward" --dtypes bfloat16 $O --budget ${B:-380} --store /tmp/b.json > $OUT/tune1.log 2>&1) &
wait
python3 - <<'PY'
import json
a, b = json.load(open("/tmp/a.json")), json.load(open("/tmp/b.json"))
for gpu, entry in b.items():
    dst = a.setdefault(gpu, entry)
    for op, by_t in entry.get("configs", {}).items():
        for t, by_n in by_t.items():
            dst.setdefault("configs", {}).setdefault(op, {}).setdefault(t, {}).update(by_n)
open("docs/helion_configs.json", "w").write(json.dumps(a, indent=1, sort_keys=True) + "\n")
PY
cp docs/helion_configs.json $OUT/
