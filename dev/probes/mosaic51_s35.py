# probe35: forward variants of page 51, A/B interleaved in one process. usage: p.py gpu|cpu DTYPE N [variant indices]
import os, sys, statistics, timeit
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
src = open(os.path.join(os.path.dirname(__file__), "..", "tutorials/deep_dives/51_rms_norm_mosaic_gpu.py")).read()
src = src[:src.index("# The drop-in function")]
ns = {"__name__": "page51"}
exec(compile(src, "page51", "exec"), ns)
exec(compile(open(os.path.join(os.path.dirname(__file__), "ab.py"  # mosaic51_s35_ab.py in dev/probes)).read(), "ab", "exec"), ns)
jax, jnp, np = ns["jax"], ns["jnp"], ns["np"]
fwd = ns["rms_norm_fwd"]
dt, N = sys.argv[2], int(sys.argv[3])
S = ns["NUM_SMS"]
V = {  # (programs, wgs, chunk, slots, outs, mode)
    ("bfloat16", 16384): [(S, 4, 1024, 4, 2, "page"), (0, 4, 1024, 0, 0, "row"), (0, 4, 1024, 0, 0, "rowsm"), (0, 2, 1024, 0, 0, "row"),
                          (0, 4, 512, 0, 0, "row")],
    ("float32", 16384): [(S, 4, 1024, 4, 2, "page"), (0, 4, 1024, 0, 0, "row"), (0, 4, 1024, 0, 0, "rowsm"), (0, 2, 1024, 0, 0, "row")],
    ("bfloat16", 32768): [(S, 4, 1024, 4, 2, "page"), (0, 4, 1024, 0, 0, "row"), (0, 4, 2048, 0, 0, "row")],
    ("float32", 32768): [(S, 4, 512, 4, 2, "page"), (0, 4, 1024, 0, 0, "row")],
    ("bfloat16", 8192): [(S, 4, 1024, 4, 2, "page"), (0, 4, 1024, 0, 0, "row"), (0, 2, 1024, 0, 0, "row")],
    ("float32", 8192): [(S, 4, 1024, 4, 2, "page"), (0, 4, 1024, 0, 0, "row")],
}[(dt, N)]
if len(sys.argv) > 4:
    V = [V[int(i)] for i in sys.argv[4:]]
gpu = sys.argv[1] == "gpu"
if sys.argv[1] == "low":
    ns["MOSAIC_INTERPRET"] = None
    for (p, g, c, s, o, m) in V:
        p = min(p, 2**27 // N)
        x, w = jax.ShapeDtypeStruct((2**27 // N, N), dt), jax.ShapeDtypeStruct((N,), dt)
        try:
            if m.startswith("ld") or m.startswith("row"):
                ns["fwd_ld"].trace(x, w, eps=1e-6, programs=2**27 // N if m.startswith("row") else p, wgs=g, chunk=c, ahead=int(m == "ld"), wg=m == "row").lower(lowering_platforms=("cuda",))
            else:
                ns["fwd_ab"].trace(x, w, eps=1e-6, programs=p, wgs=g, chunk=c, slots=s, outs=o, mode=m).lower(lowering_platforms=("cuda",))
            print("lowers", dt, N, (p, g, c, s, o, m))
        except Exception as e:
            print("NO", dt, N, (p, g, c, s, o, m), str(e)[:300])
    sys.exit()
M = 2**27 // N if gpu else 11
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
    p, g, c, s, o, m = v
    if m in ("ld", "ld0", "row", "rowsm"):
        f = jax.jit(lambda x, w, p=p, g=g, c=c, m=m: ns["fwd_ld"](x, w, eps=1e-6, programs=x.shape[0] if m.startswith("row") else min(p, x.shape[0]), wgs=g, chunk=c, ahead=int(m == "ld"), wg=m == "row"))
    elif m == "page":
        f = jax.jit(lambda x, w, p=p, g=g, c=c, s=s, o=o: fwd(x, w, eps=1e-6, programs=min(p, x.shape[0]), wgs=g, chunk=c, slots=s, outs=o))
    else:
        f = jax.jit(lambda x, w, p=p, g=g, c=c, s=s, o=o, m=m: ns["fwd_ab"](x, w, eps=1e-6, programs=min(p, x.shape[0]), wgs=g, chunk=c, slots=s, outs=o, mode=m))
    try:
        y = np.asarray(f(x, w)[:271], np.float64)
        err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        y2 = np.asarray(f(x, w)); same = bool((y2 == np.asarray(f(x, w))).all())
        print(f"{dt} {N} {v}: rel err {err:.2e} same bits {same}", flush=True)
        fns[v] = f
    except Exception as e:
        print(f"{dt} {N} {v}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
if not gpu:
    from jax._src.pallas.mosaic_gpu.interpret.interpret_pallas_call import get_races
    print("races found:", get_races().races_found)
    sys.exit()
res = {v: [] for v in fns}
for r in range(3):
    light = max(2 * x.nbytes / bench(copy, x) * 1e-6 for _ in range(3))
    for v, f in fns.items():
        res[v].append(100 * 2 * x.nbytes / bench(f, x, w) * 1e-6 / light)
    print(f"round {r}: light {light:.0f} GB/s", flush=True)
for v, r in res.items():
    print(f"RESULT {dt} {N} {v}: " + " / ".join(f"{a:.1f}" for a in r) + f"  median {statistics.median(r):.1f}", flush=True)
