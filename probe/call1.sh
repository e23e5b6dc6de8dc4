#!/usr/bin/env bash
# tune Helion's layer norm (both GPUs in parallel), then run deep dive 62 on both GPUs
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/helion-site .whl-helion/*.whl || exit 1
nvidia-smi -L > $OUT/gpus.txt
export PYTHONUNBUFFERED=1 HELION_AUTOTUNE_BENCHMARK_SUBPROCESS=0
cp docs/helion_configs.json /tmp/a.json; cp docs/helion_configs.json /tmp/b.json
T=dev/helion_tune.py; O="--effort quick --seconds 10"
(CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/helion-site:/tmp/site timeout 400 python3 $T "layer_norm forward" "rms_norm backward" $O --budget ${B:-330} --store /tmp/a.json > $OUT/tune0.log 2>&1) &
(CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/helion-site:/tmp/site timeout 400 python3 $T "layer_norm backward" "softmax backward" "cross_entropy" $O --budget ${B:-330} --store /tmp/b.json > $OUT/tune1.log 2>&1) &
wait
python3 - <<'PY'
import json
a, b = json.load(open("/tmp/a.json")), json.load(open("/tmp/b.json"))
for gpu, entry in b.items():
    dst = a.setdefault(gpu, entry)
    for op, by_t in entry.get("configs", {}).items():
        for t, by_n in by_t.items():
            dst.setdefault("configs", {}).setdefault(op, {}).setdefault(t, {}).update(by_n)
json.dump(a, open("docs/helion_configs.json", "w"), indent=1, sort_keys=True); open("docs/helion_configs.json", "a").write("\n")
PY
cp docs/helion_configs.json $OUT/
export PYTHONPATH=/tmp/site
start=$(date +%s)
timeout ${T62:-170} python3 tutorials/deep_dives/62_cross_entropy_vocab_parallel.py > $OUT/dd62.log 2>&1; echo "dd62 exit $? in $(( $(date +%s) - start )) s" >> $OUT/dd62.log
