# dev/probes/mosaic51_s37_pairs.py (run as probe37/p4.py at the repository root): how much one reading of page 51's cells moves, by method. usage: p4.py gpu|cpu
# Each repetition allocates a fresh x (new buffers), then reads ours and 05 against the copy five ways:
#  page   : light = best of 3 medians (7 runs x 10 calls); provider = one median      (as the page does now)
#  best3  : provider = best of 3 medians
#  c50    : provider = one median of 7 runs x 50 calls
#  pair   : 15 pairs (copy run, provider run) back to back, 10 calls each; median of the ratios
#  min    : light = fastest of 21 runs, provider = fastest of 21 runs (10 calls each)
import os, sys, statistics, timeit, time
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
src = open(os.path.join(os.path.dirname(__file__), "..", "tutorials/deep_dives/51_rms_norm_mosaic_gpu.py")).read()
src = src[:src.index("# %%\n# Correctness")]
ns = {"__name__": "page51"}
exec(compile(src, "page51", "exec"), ns)
jax, jnp = ns["jax"], ns["jnp"]
gpu = sys.argv[1] == "gpu"
REPS = 6 if gpu else 1
def runs(fn, *a, calls=10, rep=7):
    def run():
        for _ in range(calls): o = fn(*a)
        jax.block_until_ready(o)
    run()
    return [t / calls for t in timeit.repeat(run, number=1, repeat=rep)]
med = lambda fn, *a, **k: statistics.median(runs(fn, *a, **k))
def pair(f, g, a, b, n=15):
    r = []
    for _ in range(n):
        r.append(runs(f, *a, rep=1)[0] / runs(g, *b, rep=1)[0])
    return 100 * statistics.median(r)
copy = jax.jit(jnp.copy)
provs = {"ours": jax.jit(ns["rms_norm"]), "05": jax.jit(ns["forward_05"])}
cells = [("bfloat16", 16384), ("bfloat16", 24576), ("bfloat16", 32768), ("float32", 32768)] if gpu else [("bfloat16", 4096)]
t0 = time.time()
for dt, N in cells:
    res = {}
    for r in range(REPS):
        x = jax.random.normal(jax.random.key(r), (2**27 // N if gpu else 4, N), dt)
        w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (N,))).astype(dt)
        light_t = min(med(copy, x) for _ in range(3))
        light_min = min(runs(copy, x, rep=21))
        for p, fn in provs.items():
            res.setdefault(f"{p} page", []).append(100 * light_t / med(fn, x, w))
            res.setdefault(f"{p} best3", []).append(100 * light_t / min(med(fn, x, w) for _ in range(3)))
            res.setdefault(f"{p} c50", []).append(100 * light_t / med(fn, x, w, calls=50))
            res.setdefault(f"{p} pair", []).append(pair(copy, fn, (x,), (x, w)))
            res.setdefault(f"{p} min", []).append(100 * light_min / min(runs(fn, x, w, rep=21)))
        res.setdefault("light GB/s", []).append(2 * x.nbytes / light_t * 1e-9)
        del x
    for k, v in res.items():
        print(f"RESULT {dt} {N} {k:10s}: " + " / ".join(f"{a:6.1f}" for a in v) + f"  spread {max(v) - min(v):5.1f}  median {statistics.median(v):.1f}", flush=True)
print(f"took {time.time() - t0:.0f} s")
