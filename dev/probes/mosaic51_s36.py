# probe36: page 51's rms_norm_fwd (and the ring) at several launches, interleaved in one process. usage: p.py gpu|cpu|low DTYPE N
import os, sys, statistics, timeit
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
src = open(os.path.join(os.path.dirname(__file__), "..", "tutorials/deep_dives/51_rms_norm_mosaic_gpu.py")).read()
src = src[:src.index("# The drop-in function")]
ns = {"__name__": "page51"}
exec(compile(src, "page51", "exec"), ns)
jax, jnp, np = ns["jax"], ns["jnp"], ns["np"]
dt, N = sys.argv[2], int(sys.argv[3])
S = ns["NUM_SMS"]
V = {  # (wgs, chunk) of the row kernel, or ("ring", chunk)
    ("bfloat16", 32768): [(4, 1024), (4, 2048), (4, 4096), (2, 2048), (8, 2048)],
    ("float32", 32768): [(8, 1024), ("ring", 512), (8, 2048), (4, 1024)],
    ("bfloat16", 65536): [(8, 1024), (8, 2048), (4, 2048)],
    ("float32", 24576): [(8, 1024), (4, 2048), ("ring", 1024)],
    ("bfloat16", 16384): [(2, 1024), (4, 512), (2, 2048), (4, 1024)],
    ("float32", 8192): [(4, 1024), (4, 2048), (4, 512)],
    ("float32", 16384): [(4, 1024), (4, 2048)],
    ("bfloat16", 8192): [(2, 1024), (2, 2048), (4, 1024)],
    ("float32", 65536): [(8, 2048), (8, 1024)],
    ("float32", 40960): [(8, 1024), (4, 2048), ("ring", 512)],
    ("bfloat16", 40960): [(4, 2048), (8, 1024), ("ring", 1024)],
}[(dt, N)]
def launch(v, M):
    if v[0] == "ring":
        return lambda x, w: ns["rms_norm_fwd_ring"](x, w, eps=1e-6, programs=min(M, S), wgs=4, chunk=v[1], slots=4, outs=2)
    return lambda x, w: ns["rms_norm_fwd"](x, w, eps=1e-6, wgs=v[0], chunk=v[1])
if sys.argv[1] == "low":
    ns["MOSAIC_INTERPRET"] = None
    M = 2**27 // N
    for v in V:
        try:
            jax.jit(launch(v, M)).trace(jax.ShapeDtypeStruct((M, N), dt), jax.ShapeDtypeStruct((N,), dt)).lower(lowering_platforms=("cuda",))
            print("lowers", dt, N, v)
        except Exception as e:
            print("NO", dt, N, v, str(e)[:300])
    sys.exit()
gpu = sys.argv[1] == "gpu"
M = 2**27 // N if gpu else 3
x = jax.random.normal(jax.random.key(0), (M, N), jnp.float32).astype(dt)
w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (N,))).astype(dt)
xs = np.asarray(x[:271], np.float64); ws = np.asarray(w, np.float64)
ref = xs / np.sqrt(np.mean(xs * xs, -1, keepdims=True) + 1e-6) * ws
def bench(fn, *a, calls=10, rep=7):
    def run():
        for _ in range(calls): o = fn(*a)
        jax.block_until_ready(o)
    run()
    return 1e3 * statistics.median(timeit.repeat(run, number=1, repeat=rep)) / calls
copy = jax.jit(jnp.copy)
fns = {}
for v in V:
    f = jax.jit(launch(v, M))
    try:
        y = np.asarray(f(x, w)[:271], np.float64)
        err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        print(f"{dt} {N} {v}: rel err {err:.2e}", flush=True)
        fns[v] = f
    except Exception as e:
        print(f"{dt} {N} {v}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
if not gpu:
    sys.exit()
res = {v: [] for v in fns}
for r in range(3):
    light = max(2 * x.nbytes / bench(copy, x) * 1e-6 for _ in range(3))
    for v, f in fns.items():
        res[v].append(100 * 2 * x.nbytes / bench(f, x, w) * 1e-6 / light)
    print(f"round {r}: light {light:.0f} GB/s", flush=True)
for v, r in res.items():
    print(f"RESULT {dt} {N} {v}: " + " / ".join(f"{a:.1f}" for a in r) + f"  median {statistics.median(r):.1f}", flush=True)
