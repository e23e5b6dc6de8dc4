# probe36/p2: page 51's drop-in vs its kernel vs 05's forward, page-made x vs probe-made x, one process. usage: p2.py gpu|cpu DTYPE N
import os, sys, statistics, timeit
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
src = open(os.path.join(os.path.dirname(__file__), "..", "tutorials/deep_dives/51_rms_norm_mosaic_gpu.py")).read()
src = src[:src.index("# %%\n# Correctness")]
ns = {"__name__": "page51"}
exec(compile(src, "page51", "exec"), ns)
jax, jnp, np = ns["jax"], ns["jnp"], ns["np"]
dt, N = sys.argv[2], int(sys.argv[3])
gpu = sys.argv[1] == "gpu"
M = 2**27 // N if gpu else 3
xa = jax.random.normal(jax.random.key(0), (M, N), jnp.float32).astype(dt)   # the probe's x
xp = jax.random.normal(jax.random.key(0), (M, N), dt)                        # the page's x
w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (N,))).astype(dt)
launch = ns["_config"](N, jnp.dtype(dt).itemsize)
print("launch", launch, flush=True)
kern = jax.jit(lambda x, w: ns["rms_norm_fwd"](x, w, eps=1e-6, **launch))
V = {"kernel, probe x": (kern, xa), "kernel, page x": (kern, xp), "drop-in, page x": (jax.jit(ns["rms_norm"]), xp),
     "drop-in, probe x": (jax.jit(ns["rms_norm"]), xa), "05, page x": (jax.jit(ns["forward_05"]), xp),
     "k8, page x": (jax.jit(lambda x, w: ns["rms_norm_fwd"](x, w, eps=1e-6, wgs=8, chunk=2048 if N % 16384 == 0 else 1024)), xp)}
def bench(fn, *a, calls=10, rep=7):
    def run():
        for _ in range(calls): o = fn(*a)
        jax.block_until_ready(o)
    run()
    return 1e3 * statistics.median(timeit.repeat(run, number=1, repeat=rep)) / calls
copy = jax.jit(jnp.copy)
for k, (f, x) in V.items():
    y = np.asarray(f(x, w)[:64], np.float64); xs = np.asarray(x[:64], np.float64)
    ref = xs / np.sqrt(np.mean(xs * xs, -1, keepdims=True) + 1e-6) * np.asarray(w, np.float64)
    print(k, "rel err", np.linalg.norm(y - ref) / np.linalg.norm(ref), flush=True)
if not gpu:
    sys.exit()
res = {k: [] for k in V}
for r in range(3):
    light = max(2 * xp.nbytes / bench(copy, xp) * 1e-6 for _ in range(3))
    for k, (f, x) in V.items():
        res[k].append(100 * 2 * x.nbytes / bench(f, x, w) * 1e-6 / light)
    print(f"round {r}: light {light:.0f} GB/s", flush=True)
for k, r in res.items():
    print(f"RESULT {dt} {N} {k}: " + " / ".join(f"{a:.1f}" for a in r) + f"  median {statistics.median(r):.1f}", flush=True)
