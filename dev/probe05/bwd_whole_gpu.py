"""Scratch (issue 19, session 20): backward for rows of 16 K-32 K: one program an SM (32 warps), a row or a
slice of it held in registers, the next row's first AHEAD of PARTS parts loaded before the wait/compute;
slices exchange shares through an int32 buffer filled with -1. Usage: python3 dev/probe05/bwd_whole_gpu.py "SLICE,PARTS,AHEAD;..." N,N"""
import os, sys, functools, statistics, timeit
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
src = open("tutorials/05_jax_rms_norm.py").read(); src = src[:src.index("\n# Correctness")]
g = {"__name__": "probe"}; exec(compile(src, "page05", "exec"), g)
jax, jnp, pl, plgpu = g["jax"], g["jnp"], g["pl"], g["plgpu"]
f32, i32 = jnp.float32, jnp.int32
ON_GPU, _load = g["ON_GPU"], g["_load"]

def kernel(x_ref, w_ref, rstd_ref, dy_ref, shares_in, dx_ref, dw_partial_ref, shares_ref, *, SLICE, SLICES, PARTS, AHEAD):
    (n_rows, n_cols), pid, n_programs = x_ref.shape, pl.program_id(0), pl.num_programs(0)
    groups, grp, s = n_programs // SLICES, pid // SLICES, pid % SLICES
    P_ = SLICE // PARTS
    cols = [s * SLICE + k * P_ + jnp.arange(P_) for k in range(PARTS)]
    def pair(row, k):
        ok = (row < n_rows) & (cols[k] < n_cols)
        return (plgpu.load(x_ref.at[row, cols[k]], mask=ok, other=0), plgpu.load(dy_ref.at[row, cols[k]], mask=ok, other=0))
    weight = lambda k: _load(w_ref, cols[k], cols[k] < n_cols)
    slots = jnp.arange(SLICES)
    def wait(row):
        read = lambda _: plgpu.load(shares_ref.at[row, slots], volatile=True)
        words = jax.lax.while_loop(lambda w_: jnp.sum((w_ == -1).astype(i32)) > 0, read, read(None))
        words = jnp.where(words == -1, read(None), words)
        return jnp.sum(jax.lax.bitcast_convert_type(words, f32))
    def step(i, carry):
        dw, ahead = carry
        row = grp + i * groups
        xd = list(ahead) + [pair(row, k) for k in range(AHEAD, PARTS)]
        share = jnp.sum(sum(d.astype(f32) * weight(k) * x.astype(f32) for k, (x, d) in enumerate(xd)))
        if SLICES > 1:
            plgpu.atomic_xchg(shares_ref, (row, s), jax.lax.bitcast_convert_type(share, i32), mask=row < n_rows)
        ahead = tuple(pair(row + groups, k) for k in range(AHEAD))
        dot = wait(row) if SLICES > 1 else share
        rstd = plgpu.load(rstd_ref.at[pl.ds(row, 1)])[0]
        c = dot * rstd / n_cols
        dw = list(dw)
        for k, (x, d) in enumerate(xd):
            x_hat, d = x.astype(f32) * rstd, d.astype(f32)
            dx = (d * weight(k) - x_hat * c) * rstd
            plgpu.store(dx_ref.at[row, cols[k]], dx.astype(dx_ref.dtype), mask=cols[k] < n_cols)
            dw[k] = dw[k] + d * x_hat
        return tuple(dw), ahead
    n_mine = pl.cdiv(n_rows - grp, groups)
    init = tuple(jnp.zeros((P_,), f32) for _ in range(PARTS)), tuple(pair(grp, k) for k in range(AHEAD))
    dw, _ = jax.lax.fori_loop(0, n_mine, step, init)
    for k in range(PARTS):
        plgpu.store(dw_partial_ref.at[grp, cols[k]], dw[k], mask=cols[k] < n_cols)

def backward(x2d, w, rstd, dy2d, *, SLICE, PARTS, AHEAD, warps=32):
    n_rows, n_cols = x2d.shape
    slices = pl.cdiv(n_cols, SLICE)
    groups = min(n_rows, g["NUM_SMS"] // slices)
    shares = jnp.full((n_rows, slices), -1, i32)
    dx, dw_partial, _ = pl.pallas_call(functools.partial(kernel, SLICE=SLICE, SLICES=slices, PARTS=PARTS, AHEAD=AHEAD),
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
VARIANTS = [tuple(map(int, v.split(","))) for v in sys.argv[1].split(";")]
DTYPES = sys.argv[3].split(",") if len(sys.argv) > 3 else ("float32", "bfloat16")
for dtype in DTYPES:
    for n in map(int, sys.argv[2].split(",")):
        x, dy = (jax.random.normal(jax.random.key(k), (TOTAL // n, n), dtype) for k in (0, 1))
        w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (n,))).astype(dtype)
        y, rstd = g["_forward"](x, w, 1e-6)
        page = jax.jit(g["_backward"])
        ref_dx, ref_dw = page(x, w, rstd, dy)
        fns = {"page": page}
        for v in VARIANTS:
            if n % v[0] or (not ON_GPU and n // v[0] > 1):
                continue
            fn = jax.jit(functools.partial(backward, SLICE=v[0], PARTS=v[1], AHEAD=v[2]))
            dx, dw = fn(x, w, rstd, dy)
            e1 = float(jnp.max(jnp.abs(dx.astype(f32) - ref_dx.astype(f32)))); e2 = float(jnp.max(jnp.abs(dw - ref_dw)) / jnp.max(jnp.abs(ref_dw)))
            print(dtype, n, v, "max err dx", e1, "dw rel", e2, flush=True)
            fns["s%d p%d a%d" % v] = fn
        if not ON_GPU:
            continue
        res = {}
        for rnd in range(3):
            light = 2 * x.nbytes / min(bench(copy, x) for _ in range(2)) * 1e-6
            for name, fn in fns.items():
                res.setdefault(name, []).append(100 * 3 * x.nbytes / bench(fn, x, w, rstd, dy) * 1e-6 / light)
        for name, v in res.items():
            print(dtype, n, f"{name:14s}", " ".join(f"{p:.1f}" for p in v), f"med {statistics.median(v):.1f}", flush=True)
        del x, dy, w, y, rstd, ref_dx, ref_dw, fns
