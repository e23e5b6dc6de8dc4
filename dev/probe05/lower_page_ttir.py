import os, functools, sys
os.environ["JAX_PLATFORMS"] = "cpu"
path = sys.argv[1]; n_cols = int(sys.argv[2]); dt = sys.argv[3]; which = sys.argv[4] if len(sys.argv) > 4 else "bwd"
src = open(path).read(); src = src[:src.index("\n# Correctness")]
g = {"__name__": "probe"}; exec(compile(src, path, "exec"), g)
for extra in sys.argv[5:]:
    exec(open(extra).read(), g)
jax, jnp, pl, plgpu = g["jax"], g["jnp"], g["pl"], g["plgpu"]
g["NUM_SMS"] = 132
DT = getattr(jnp, dt); f32 = jnp.float32
n_rows = 2**26 // n_cols
S = jax.ShapeDtypeStruct
if which == "bwd":
    meta, grid, params = g["_bwd_config"](n_rows, n_cols, DT.dtype.itemsize)
    print("CONFIG", meta, grid, params, file=sys.stderr)
    call = pl.pallas_call(functools.partial(g["bwd_kernel"], **meta), out_shape=(S((n_rows, n_cols), DT), S((grid, n_cols), f32)),
        grid=(grid,), compiler_params=params, interpret=False, debug=True)
    args = (S((n_rows, n_cols), DT), S((n_cols,), DT), S((n_rows,), f32), S((n_rows, n_cols), DT))
else:
    kernel, meta, grid, params = g["_fwd_config"](n_rows, n_cols, DT.dtype.itemsize)
    print("CONFIG", kernel.__name__, meta, grid, params, file=sys.stderr)
    call = pl.pallas_call(functools.partial(kernel, eps=1e-6, **meta), out_shape=(S((n_rows, n_cols), DT), S((n_rows,), f32)),
        grid=(grid,), compiler_params=params, interpret=False, debug=True)
    args = (S((n_rows, n_cols), DT), S((n_cols,), DT))
jax.export.export(jax.jit(call), platforms=["cuda"])(*args)
