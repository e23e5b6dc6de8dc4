# Probe (session 33): a 2-block cluster reading the peer's SMEM through plgpu.cluster_ref (lowers for sm_90 in JAX 0.11.2 and 0.12.0.1; their interpreters reject it). Never run on a GPU.
import functools, jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
def body(x_gmem, o_gmem, buf, res, bar):
    c = jax.lax.axis_index("c")
    buf[...] = jnp.full((256,), c.astype(jnp.float32) + 1, jnp.float32)
    plgpu.barrier_arrive(bar); plgpu.barrier_wait(bar)
    other = plgpu.cluster_ref(buf, {"c": 1 - c})
    res[...] = buf[...] + other[...]
    plgpu.barrier_arrive(bar); plgpu.barrier_wait(bar)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(res, o_gmem.at[c]); plgpu.wait_smem_to_gmem(0)
def f(x, interpret):
    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((2, 256), jnp.float32), grid=(1,), grid_names=("g",),
                 cluster=(2,), cluster_names=("c",),
                 scratch_types=[plgpu.SMEM((256,), jnp.float32), plgpu.SMEM((256,), jnp.float32), plgpu.ClusterBarrier(collective_axes=("c",))],
                 interpret=plgpu.InterpretGPUParams(detect_races=True) if interpret else None)(x)
x = jnp.zeros((2, 256), jnp.float32)
try:
    print("interpret:", f(x, True)[:, :3])
except Exception as e:
    print("interpret FAIL", type(e).__name__, " ".join(str(e).split())[:300])
try:
    jax.jit(functools.partial(f, interpret=False)).trace(x).lower(lowering_platforms=("cuda",)); print("lowered")
except Exception as e:
    print("lower FAIL", type(e).__name__, " ".join(str(e).split())[:400])
