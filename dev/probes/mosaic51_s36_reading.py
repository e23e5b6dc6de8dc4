# probe36/p3: how much one reading of page 51's cell moves, by method, one process. usage: p3.py gpu|cpu
# For each (dtype, N): five repetitions of [light = fastest of 3 copies; ours and 05 read as the page does (median of
# 7 runs of 10 calls), as the best of 3 such readings, and with 50 calls a run]; the spread of each over the five.
import os, sys, statistics, timeit
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
src = open(os.path.join(os.path.dirname(__file__), "..", "tutorials/deep_dives/51_rms_norm_mosaic_gpu.py")).read()
src = src[:src.index("# %%\n# Correctness")]
ns = {"__name__": "page51"}
exec(compile(src, "page51", "exec"), ns)
jax, jnp = ns["jax"], ns["jnp"]
gpu = sys.argv[1] == "gpu"
def bench(fn, *a, calls=10, rep=7):
    def run():
        for _ in range(calls): o = fn(*a)
        jax.block_until_ready(o)
    run()
    return 1e3 * statistics.median(timeit.repeat(run, number=1, repeat=rep)) / calls
copy, ours, t05 = jax.jit(jnp.copy), jax.jit(ns["rms_norm"]), jax.jit(ns["forward_05"])
for dt, N in ([("bfloat16", 16384), ("bfloat16", 24576), ("bfloat16", 32768), ("float32", 32768)] if gpu else [("bfloat16", 4096)]):
    x = jax.random.normal(jax.random.key(0), (2**27 // N if gpu else 4, N), dt)
    w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (N,))).astype(dt)
    gb = lambda ms: 2 * x.nbytes / ms * 1e-6
    res = {k: [] for k in ("ours x1", "ours best of 3", "ours 50 calls", "05 x1", "05 best of 3")}
    for r in range(5 if gpu else 1):
        light = max(gb(bench(copy, x)) for _ in range(3))
        res["ours x1"].append(100 * gb(bench(ours, x, w)) / light)
        res["ours best of 3"].append(100 * max(gb(bench(ours, x, w)) for _ in range(3)) / light)
        res["ours 50 calls"].append(100 * gb(bench(ours, x, w, calls=50)) / light)
        res["05 x1"].append(100 * gb(bench(t05, x, w)) / light)
        res["05 best of 3"].append(100 * max(gb(bench(t05, x, w)) for _ in range(3)) / light)
    for k, v in res.items():
        print(f"RESULT {dt} {N} {k}: " + " / ".join(f"{a:.1f}" for a in v) + f"  spread {max(v) - min(v):.1f}", flush=True)
    del x
