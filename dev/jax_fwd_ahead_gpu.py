"""Scratch (issue 19): persistent fp32 forward variants (warps, PARTS, AHEAD) against the page and a copy. Removed from dev/ in the next commit."""
import os, sys, functools, statistics, timeit
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
path = "tutorials/05_jax_rms_norm.py"
src = open(path).read(); src = src[:src.index("\n# Correctness")]
g = {"__name__": "probe"}; exec(compile(src, path, "exec"), g)
jax, jnp, pl, plgpu = g["jax"], g["jnp"], g["pl"], g["plgpu"]
f32 = jnp.float32
ON_GPU = g["ON_GPU"]

def fwd_ahead_kernel(x_ref, w_ref, y_ref, rstd_ref, *, eps, PART_N, PARTS, AHEAD):
    (n_rows, n_cols), pid, P = x_ref.shape, pl.program_id(0), pl.num_programs(0)
    cols = [k * PART_N + jnp.arange(PART_N) for k in range(PARTS)]
    def load(row, k):
        return plgpu.load(x_ref.at[row, cols[k]], mask=(cols[k] < n_cols) & (row < n_rows), other=0)
    def step(i, head):
        row = pid + i * P
        x = [v.astype(f32) for v in head] + [load(row, k).astype(f32) for k in range(AHEAD, PARTS)]
        ss = x[0] * x[0]
        for v in x[1:]:
            ss = ss + v * v
        rstd = jax.lax.rsqrt(jnp.sum(ss) / n_cols + eps)
        head = tuple(load(row + P, k) for k in range(AHEAD))
        for k in range(PARTS):
            y = x[k] * rstd * g["_load"](w_ref, cols[k], cols[k] < n_cols)
            plgpu.store(y_ref.at[row, cols[k]], y.astype(y_ref.dtype), mask=cols[k] < n_cols)
        plgpu.store(rstd_ref.at[pl.ds(row, 1)], jnp.full((1,), rstd))
        return head
    n_mine = pl.cdiv(n_rows - pid, P)
    jax.lax.fori_loop(0, n_mine, step, tuple(load(pid, k) for k in range(AHEAD)))

def variant(warps, parts, ahead, per_sm=1):
    def f(x, w):
        n_rows, n_cols = x.shape
        pn = pl.next_power_of_2(n_cols) // parts
        grid = min(n_rows, per_sm * g["NUM_SMS"])
        return pl.pallas_call(functools.partial(fwd_ahead_kernel, eps=1e-6, PART_N=pn, PARTS=parts, AHEAD=ahead),
            out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((n_rows,), f32)), grid=(grid,),
            compiler_params=g["_params"](warps), interpret=g["INTERPRET"])(x, w)[0]
    return jax.jit(f)

VARIANTS = {"page": jax.jit(g["rms_norm"])}
for v in [(32, 8, 2), (32, 8, 4), (32, 16, 2), (32, 16, 4), (32, 16, 6), (16, 8, 4), (16, 16, 4)]:
    VARIANTS["w%d p%d a%d" % v] = variant(*v)

def bench(fn, *args, CALLS=20, REPEATS=10):
    def run():
        for _ in range(CALLS):
            out = fn(*args)
        jax.block_until_ready(out)
    run()
    return 1e3 * statistics.median(timeit.repeat(run, number=1, repeat=REPEATS)) / CALLS

TOTAL = 2**26 if ON_GPU else 2**16
copy = jax.jit(jnp.copy)
for dtype, n in [("float32", 32768)]:
    x = jax.random.normal(jax.random.key(0), (TOTAL // n, n), dtype) * 3 + 1
    w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (n,))).astype(dtype)
    ref = g["rms_norm_reference"](x.astype(f32), w.astype(f32))
    for name, fn in VARIANTS.items():
        err = float(jnp.max(jnp.abs(fn(x, w).astype(f32) - ref)))
        assert err < (1e-4 if dtype == "float32" else 0.05), (name, err)
    if not ON_GPU:
        print("cpu ok", dtype, n); continue
    res = {}
    for rnd in range(3):
        light = 2 * x.nbytes / bench(copy, x) * 1e-6
        for name, fn in VARIANTS.items():
            res.setdefault(name, []).append(100 * 2 * x.nbytes / bench(fn, x, w) * 1e-6 / light)
    for name, v in res.items():
        print(dtype, n, f"{name:12s}", " ".join(f"{p:.1f}" for p in v), f"med {statistics.median(v):.1f}", flush=True)
