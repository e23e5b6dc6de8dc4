"""Scratch (issue 19): the split backward with shares exchanged through global memory, and the page's forward
before/after the persistent fp32 32 K kernel. Usage: python3 dev/jax_long_rows_gpu.py bwd "SLICE,warps,per_sm,ahead;..." 16384,32768
and python3 dev/jax_long_rows_gpu.py fwd. Removed from dev/ in the next commit (design record)."""
import os, sys, functools, statistics, timeit, itertools
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
def load_page(path):
    src = open(path).read(); src = src[:src.index("\n# Correctness")]
    g = {"__name__": "probe"}; exec(compile(src, path, "exec"), g); return g
g = load_page("tutorials/05_jax_rms_norm.py")
jax, jnp, pl, plgpu = g["jax"], g["jnp"], g["pl"], g["plgpu"]
f32, i32 = jnp.float32, jnp.int32
ON_GPU, _load = g["ON_GPU"], g["_load"]
MODE = sys.argv[1] if len(sys.argv) > 1 else "bwd"

def bwd_split_kernel(x_ref, w_ref, rstd_ref, dy_ref, shares_in, dx_ref, dw_partial_ref, shares_ref, *, SLICE, SLICES, AHEAD):
    (n_rows, n_cols), pid, n_programs = x_ref.shape, pl.program_id(0), pl.num_programs(0)
    groups = n_programs // SLICES
    grp, s = pid // SLICES, pid % SLICES
    col = s * SLICE + jnp.arange(SLICE)
    w = _load(w_ref, col, col < n_cols)
    def fetch(row, policy=None):
        ok = (col < n_cols) & (row < n_rows)
        return _load(x_ref, (row, col), ok, policy), _load(dy_ref, (row, col), ok, policy)
    def publish(row, x, dy):
        share = jax.lax.bitcast_convert_type(jnp.sum(dy * w * x), i32)
        plgpu.atomic_xchg(shares_ref, (row, s), share, mask=row < n_rows)
    slots = jnp.arange(SLICES)
    def wait(row):
        read = lambda _: plgpu.load(shares_ref.at[row, slots], volatile=True)
        words = jax.lax.while_loop(lambda w_: jnp.sum((w_ == -1).astype(i32)) > 0, read, read(None))
        words = jnp.where(words == -1, read(None), words)  # a stale copy: read once more
        return jnp.sum(jax.lax.bitcast_convert_type(words, f32))
    n_mine = pl.cdiv(n_rows - grp, groups)
    def step(i, carry):
        dw, x, dy = carry
        row = grp + i * groups
        xn, dyn = fetch(row + groups)
        dot = wait(row)
        rstd = plgpu.load(rstd_ref.at[pl.ds(row, 1)])[0]
        x_hat = x * rstd
        dx = (dy * w - x_hat * (dot * rstd / n_cols)) * rstd
        plgpu.store(dx_ref.at[row, col], dx.astype(dx_ref.dtype), mask=col < n_cols)
        publish(row + groups, xn, dyn)
        return dw + dy * x_hat, xn, dyn
    if AHEAD == 0:  # version 1: rows held in registers, one row ahead
        x0, dy0 = fetch(grp)
        publish(grp, x0, dy0)
        dw, _, _ = jax.lax.fori_loop(0, n_mine, step, (jnp.zeros((SLICE,), f32), x0, dy0))
    else:  # version 3: shares AHEAD rows ahead; a row's slice re-read from L2 for dx
        def step3(i, dw):
            row = grp + i * groups
            xa, dya = fetch(row + AHEAD * groups, "evict_last")
            dot = wait(row)
            x, dy = fetch(row, "evict_first")
            rstd = plgpu.load(rstd_ref.at[pl.ds(row, 1)])[0]
            x_hat = x * rstd
            dx = (dy * w - x_hat * (dot * rstd / n_cols)) * rstd
            plgpu.store(dx_ref.at[row, col], dx.astype(dx_ref.dtype), mask=col < n_cols)
            publish(row + AHEAD * groups, xa, dya)
            return dw + dy * x_hat
        for k in range(AHEAD):
            publish(grp + k * groups, *fetch(grp + k * groups, "evict_last"))
        dw = jax.lax.fori_loop(0, n_mine, step3, jnp.zeros((SLICE,), f32))
    plgpu.store(dw_partial_ref.at[grp, col], dw, mask=col < n_cols)

def split_backward(x2d, w, rstd, dy2d, *, SLICE, warps, per_sm, ahead):
    n_rows, n_cols = x2d.shape
    slices = pl.cdiv(n_cols, SLICE)
    groups = min(n_rows, per_sm * g["NUM_SMS"] // slices)
    shares = jnp.full((n_rows, slices), -1, i32)
    dx, dw_partial, _ = pl.pallas_call(functools.partial(bwd_split_kernel, SLICE=SLICE, SLICES=slices, AHEAD=ahead),
        out_shape=(jax.ShapeDtypeStruct(x2d.shape, x2d.dtype), jax.ShapeDtypeStruct((groups, n_cols), f32),
                   jax.ShapeDtypeStruct(shares.shape, i32)),
        grid=(groups * slices,), input_output_aliases={4: 2}, compiler_params=g["_params"](warps),
        interpret=g["INTERPRET"])(x2d, w, rstd, dy2d, shares)
    meta, params = g["_sum_config"](n_cols)
    dw = pl.pallas_call(functools.partial(g["dw_sum_kernel"], **meta), out_shape=jax.ShapeDtypeStruct((n_cols,), f32),
        grid=(pl.cdiv(n_cols, meta["BLOCK_N"]),), compiler_params=params, interpret=g["INTERPRET"])(dw_partial)
    return dx, dw

def bench(fn, *args, CALLS=20, REPEATS=10):
    def run():
        for _ in range(CALLS):
            out = fn(*args)
        jax.block_until_ready(out)
    run()
    return 1e3 * statistics.median(timeit.repeat(run, number=1, repeat=REPEATS)) / CALLS

TOTAL = 2**26 if ON_GPU else 2**14
copy = jax.jit(jnp.copy)
if MODE == "bwd":
    VARIANTS = [tuple(map(int, v.split(","))) for v in sys.argv[2].split(";")]  # SLICE,warps,per_sm
    shapes = [(d, int(n)) for d in ("float32", "bfloat16") for n in sys.argv[3].split(",")]
    for dtype, n in shapes:
        x, dy = (jax.random.normal(jax.random.key(k), (TOTAL // n, n), dtype) for k in (0, 1))
        w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (n,))).astype(dtype)
        y, rstd = g["_forward"](x, w, 1e-6)
        page = jax.jit(g["_backward"])
        ref_dx, ref_dw = page(x, w, rstd, dy)
        fns = {"page": page}
        for v in VARIANTS:
            fn = jax.jit(functools.partial(split_backward, SLICE=v[0], warps=v[1], per_sm=v[2], ahead=v[3]))
            dx, dw = fn(x, w, rstd, dy)
            e1 = float(jnp.max(jnp.abs(dx.astype(f32) - ref_dx.astype(f32)))); e2 = float(jnp.max(jnp.abs(dw - ref_dw)) / jnp.max(jnp.abs(ref_dw)))
            print(dtype, n, v, "max err dx", e1, "dw rel", e2, flush=True)
            fns["s%d w%d p%d a%d" % v] = fn
        if not ON_GPU:
            continue
        res = {}
        for rnd in range(3):
            light = 2 * x.nbytes / bench(copy, x) * 1e-6
            for name, fn in fns.items():
                res.setdefault(name, []).append(100 * 3 * x.nbytes / bench(fn, x, w, rstd, dy) * 1e-6 / light)
        for name, v in res.items():
            print(dtype, n, f"{name:16s}", " ".join(f"{p:.1f}" for p in v), f"med {statistics.median(v):.1f}", flush=True)
else:  # forward: old page vs new page at every N
    import subprocess  # the page before the persistent forward
    open("/tmp/05_old.py", "w").write(subprocess.run(["git", "show", "a18789b:tutorials/05_jax_rms_norm.py"], capture_output=True, text=True, check=True).stdout)
    old = load_page("/tmp/05_old.py")
    fns = {"old": jax.jit(old["rms_norm"]), "new": jax.jit(g["rms_norm"]), "xla": jax.jit(g["rms_norm_reference"])}
    for dtype, n in itertools.product(["float32", "bfloat16"], [2**k for k in range(10, 16)]):
        x = jax.random.normal(jax.random.key(0), (TOTAL // n, n), dtype)
        w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (n,))).astype(dtype)
        assert float(jnp.max(jnp.abs(fns["new"](x, w).astype(f32) - fns["old"](x, w).astype(f32)))) < 1e-2
        res = {}
        for rnd in range(3):
            light = 2 * x.nbytes / bench(copy, x) * 1e-6
            for name, fn in fns.items():
                res.setdefault(name, []).append(100 * 2 * x.nbytes / bench(fn, x, w) * 1e-6 / light)
        print(dtype, n, "  ".join(f"{k} {statistics.median(v):.1f}" for k, v in res.items()), flush=True)
