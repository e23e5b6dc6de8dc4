import os, sys, functools
os.environ["JAX_PLATFORMS"] = "cpu"
src = open("dev/probe05/bwd_whole_gpu.py").read(); src = src[:src.index("\ndef bench")]
g = {"__name__": "probe"}; exec(compile(src, "bwd2", "exec"), g)
jax, jnp, pl = g["jax"], g["jnp"], g["pl"]
real = pl.pallas_call
g["pl"].pallas_call = lambda *a, **k: real(*a, **{**k, "debug": True, "interpret": False})
g["g"]["NUM_SMS"] = 132
n = int(sys.argv[1]); dt = getattr(jnp, sys.argv[2]); S, PARTS, AHEAD = map(int, sys.argv[3].split(","))
m = 2**26 // n
A = jax.ShapeDtypeStruct
fn = jax.jit(functools.partial(g["backward"], SLICE=S, PARTS=PARTS, AHEAD=AHEAD))
try:
    jax.export.export(fn, platforms=["cuda"])(A((m, n), dt), A((n,), dt), A((m,), jnp.float32), A((m, n), dt))
except Exception as e:
    pass
