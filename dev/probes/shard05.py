# Probe: why does per-device speed drop on several GPUs? (issue 33/34)
import os, sys, time, statistics, timeit, json
src = open("tutorials/05_jax_rms_norm_sharded.py").read()
src = src[:src.index("# Weak scaling, measured")]
g = {"__name__": "page"}
exec(compile(src, "page", "exec"), g)
jax, jnp, np, Mesh, NamedSharding, P = (g[k] for k in ("jax", "jnp", "np", "Mesh", "NamedSharding", "P"))
sharded_parts, EPS, AXIS = g["sharded_parts"], g["EPS"], g["AXIS"]
print([d.device_kind for d in jax.devices()], flush=True)
TOTAL = int(os.environ.get('TOTAL', 2**26))
def timed(run, repeats=7):
    run()
    return statistics.median(timeit.repeat(run, number=1, repeat=repeats))
def bench(fn, *args, calls=10):
    def run():
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
    return 1e6 * timed(run) / calls
def dispatch(fn, *args, calls=10):  # host time to issue calls, not waiting
    out = fn(*args); jax.block_until_ready(out)
    t = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        t.append(time.perf_counter() - t0)
        jax.block_until_ready(out)
    return 1e6 * statistics.median(t) / calls
K = 20
rows_out = []
for n_dev in sorted({1, 2, jax.device_count()}):
    mesh = Mesh(np.array(jax.devices()[:n_dev]), (AXIS,))
    for dtype, n_cols in [("bfloat16", 1024), ("bfloat16", 32768), ("float32", 4096)]:
        shape = (n_dev * TOTAL // n_cols, n_cols)
        sh = NamedSharding(mesh, P(AXIS))
        x = jax.device_put(jax.random.normal(jax.random.key(0), shape, dtype), sh)
        dy = jax.device_put(jax.random.normal(jax.random.key(1), shape, dtype), sh)
        w_plain = (1 + 0.1 * jax.random.normal(jax.random.key(2), (n_cols,))).astype(dtype)
        w_rep = jax.device_put(w_plain, NamedSharding(mesh, P()))
        (fwd, bwd), (_, alone) = sharded_parts(mesh, EPS), sharded_parts(mesh, EPS, psum=False)
        fwd, bwd, alone = jax.jit(fwd), jax.jit(bwd), jax.jit(alone)
        rstd = fwd(x, w_rep)[1]
        nbytes = x.nbytes // n_dev
        fwd_loop = jax.jit(lambda x, w: jax.lax.fori_loop(0, K, lambda i, x: sharded_parts(mesh, EPS)[0](x, w)[0], x))
        def make_bwd_loop(psum):
            b = sharded_parts(mesh, EPS, psum=psum)[1]
            def f(x, w, rstd, dy):
                def body(i, c):
                    dy, acc = c
                    dx, dw = b(x, w, rstd, dy)
                    return dx, acc + dw.reshape(-1, dw.shape[-1]).sum(0)[: acc.shape[0]] if not psum else acc + dw
                return jax.lax.fori_loop(0, K, body, (dy, jnp.zeros((x.shape[1],), jnp.float32)))
            return jax.jit(f)
        copy = jax.jit(lambda x: x * 2)
        r = {"devices": n_dev, "dtype": dtype, "N": n_cols}
        try:
            r["fwd_us_page_wplain"] = bench(fwd, x, w_plain)
            r["fwd_us_page"] = bench(fwd, x, w_rep)
            r["fwd_us_calls100"] = bench(fwd, x, w_rep, calls=100)
            r["fwd_dispatch_us"] = dispatch(fwd, x, w_rep)
            r["fwd_us_loop"] = 1e6 * timed(lambda: jax.block_until_ready(fwd_loop(x, w_rep))) / K
            r["bwd_us_page"] = bench(bwd, x, w_rep, rstd, dy)
            r["bwd_dispatch_us"] = dispatch(bwd, x, w_rep, rstd, dy)
            r["alone_us_page"] = bench(alone, x, w_rep, rstd, dy)
            bl = make_bwd_loop(True); r["bwd_us_loop"] = 1e6 * timed(lambda: jax.block_until_ready(bl(x, w_rep, rstd, dy))) / K
            al = make_bwd_loop(False); r["alone_us_loop"] = 1e6 * timed(lambda: jax.block_until_ready(al(x, w_rep, rstd, dy))) / K
            r["x2_us"] = bench(copy, x)
            r["x2_dispatch_us"] = dispatch(copy, x)
        except Exception as e:
            r["error"] = repr(e)[:400]
        for k in list(r):
            if k.startswith(("fwd_us", "x2_us")): r[k.replace("_us", "_GBs")] = 2 * nbytes / r[k] * 1e-3
            if k.startswith(("bwd_us", "alone_us")): r[k.replace("_us", "_GBs")] = 3 * nbytes / r[k] * 1e-3
        print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()}), flush=True)
        rows_out.append(r)
        del x, dy, rstd
if n_dev > 1:
    # HLO of the forward and backward: anything besides the kernels?
    print("\n".join(l for l in fwd.lower(*(jax.device_put(jnp.ones((n_dev*8, 256), jnp.bfloat16), NamedSharding(mesh, P(AXIS))), jax.device_put(jnp.ones(256, jnp.bfloat16), NamedSharding(mesh, P())))).compile().as_text().splitlines() if "custom-call" in l or "copy" in l or "all-" in l)[:3000])
# CUPTI through torch's profiler: the kernels' own durations on each device
try:
    import torch
    from torch.profiler import profile, ProfilerActivity
    mesh = Mesh(np.array(jax.devices()), (AXIS,)); n_dev = len(jax.devices())
    for d in range(n_dev): torch.zeros(1, device=f"cuda:{d}")
    shape = (n_dev * TOTAL // 1024, 1024)
    x = jax.device_put(jax.random.normal(jax.random.key(0), shape, "bfloat16"), NamedSharding(mesh, P(AXIS)))
    w = jax.device_put(jnp.ones(1024, "bfloat16"), NamedSharding(mesh, P()))
    fwd = jax.jit(sharded_parts(mesh, EPS)[0]); jax.block_until_ready(fwd(x, w))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10): out = fwd(x, w)
        jax.block_until_ready(out)
    ev = [e for e in prof.events() if e.device_type.name == "CUDA"]
    print("cupti events", len(ev))
    by = {}
    for e in ev:
        by.setdefault((e.device_index, e.name[:40]), []).append(e.device_time)
    for k, v in sorted(by.items()): print(k, len(v), "median us", statistics.median(v))
    starts = sorted((e.device_index, e.time_range.start) for e in ev)
    print("first starts per device", starts[:12])
except Exception as e:
    print("cupti failed", repr(e)[:300])
