bash dev/quack_install.sh > $OUT/quack1.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --target /tmp/helion-site .whl-helion/*.whl
export PYTHONPATH=/tmp/helion-site:/tmp/site HELION_AUTOTUNE_BENCHMARK_SUBPROCESS=0
timeout 40 python3 probe/hostiso.py > $OUT/hostiso.log 2>&1
timeout 210 python3 -m pytest -q -rfE --tb=short -p no:cacheprovider -n 8 tests/test_host_overhead.py tests/test_helion.py tests/test_autotuning_deep_dive.py tests/test_softmax.py tests/test_softmax_staged.py > $OUT/tests.log 2>&1
cat $OUT/quack1.log; grep -v "^Built on" $OUT/hostiso.log | tail -5; grep -E "^(FAILED|ERROR|E  )|passed|failed" $OUT/tests.log | tail -40
