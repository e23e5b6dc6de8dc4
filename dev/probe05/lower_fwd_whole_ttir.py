import os, sys, functools
os.environ["JAX_PLATFORMS"] = "cpu"
src = open("dev/probe05/fwd_whole_gpu.py").read()
src = src[:src.index("def bench(")].replace('g = {"__name__": "probe"}', 'g = {"__name__": "probe"}; import builtins')
text = open("tutorials/05_jax_rms_norm.py").read()
page = text[:text.index("\n# Correctness")]
g = {"__name__": "probe"}; exec(compile(page, "page", "exec"), g)
jax, jnp, pl, plgpu = g["jax"], g["jnp"], g["pl"], g["plgpu"]
f32 = jnp.float32
exec(src[src.index("def fwd_v"):], globals())
real = pl.pallas_call
pl.pallas_call = lambda *a, **k: real(*a, **{**k, "debug": True, "interpret": False})
n, dt, mode, warps = int(sys.argv[1]), getattr(jnp, sys.argv[2]), sys.argv[3], int(sys.argv[4])
A = jax.ShapeDtypeStruct
try:
    jax.export.export(jax.jit(functools.partial(fwd, MODE=mode, warps=warps)), platforms=["cuda"])(A((2**26 // n, n), dt), A((n,), dt))
except Exception:
    pass
