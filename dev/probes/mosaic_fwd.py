# Mosaic GPU RMSNorm forward prototype: rows staged in SMEM through TMA, `stages` rows in flight a program,
# y written in place into the row's slot and stored by TMA; w in SMEM once a program.
import functools, sys, jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

C = 256   # a row of N elements viewed as (N // 256, 256): a TMA copy takes at most 256 a dimension
def rms_fwd(x, w, eps=1e-6, programs=4, stages=2, interpret=False):
    M, N = x.shape
    R = N // C
    x3, w2 = x.reshape(M, R, C), w.reshape(R, C)
    steps = pl.cdiv(M, programs)   # program p takes rows p, p + programs, ...
    def kernel(x_gmem, w_gmem, y_gmem, w_smem, x_smem, w_bar, x_bar):
        p = jax.lax.axis_index("p")
        plgpu.copy_gmem_to_smem(w_gmem, w_smem, w_bar.at[0])
        def fetch(i, slot):  # the row of step i into slot, if that row exists
            row = p + i * programs
            @pl.when(row < M)
            def _():
                plgpu.copy_gmem_to_smem(x_gmem.at[row], x_smem.at[slot], x_bar.at[slot])
        for s in range(stages):
            fetch(s, s)
        plgpu.barrier_wait(w_bar.at[0])
        def step(i, carry):
            row, slot = p + i * programs, i % stages
            @pl.when(row < M)
            def _():
                plgpu.barrier_wait(x_bar.at[slot])
                x = x_smem[slot].astype(jnp.float32)
                rstd = jax.lax.rsqrt(jnp.sum(x * x) / N + eps)
                x_smem[slot] = (x * rstd * w_smem[...].astype(jnp.float32)).astype(x_smem.dtype)
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(x_smem.at[slot], y_gmem.at[row])
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the store has read the slot: refill it
                fetch(i + stages, slot)
            return carry
        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.wait_smem_to_gmem(0)
    f = plgpu.kernel(kernel, out_type=jax.ShapeDtypeStruct(x3.shape, x.dtype), grid=(programs,), grid_names=("p",),
                     scratch_types=[plgpu.SMEM((R, C), w.dtype), plgpu.SMEM((stages, R, C), x.dtype),
                                    plgpu.Barrier(num_barriers=1), plgpu.Barrier(num_barriers=stages)],
                     interpret=plgpu.InterpretGPUParams(detect_races=True, uninitialized_memory="nan") if interpret else None)
    return f(x3, w2).reshape(M, N)

def races():
    from jax._src.pallas.mosaic_gpu.interpret.interpret_pallas_call import get_races
    return get_races().races_found

def reference(x, w, eps=1e-6):
    xf = x.astype(jnp.float32)
    return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + eps) * w.astype(jnp.float32)).astype(x.dtype)

if __name__ == "__main__" and sys.argv[1] == "cpu":
    for M, N, dt, st in [(11, 4096, jnp.bfloat16, 2), (7, 2048, jnp.float32, 3)]:
        x = jax.random.normal(jax.random.key(0), (M, N), dt)
        w = (1 + 0.1 * jax.random.normal(jax.random.key(1), (N,))).astype(dt)
        y = rms_fwd(x, w, programs=4, stages=st, interpret=True)
        err = float(jnp.max(jnp.abs(y.astype(jnp.float32) - reference(x, w).astype(jnp.float32))))
        jax.jit(functools.partial(rms_fwd, programs=132, stages=st)).trace(x, w).lower(lowering_platforms=("cuda",))
        print(M, N, dt.__name__, "err", err, "races", races(), "lowers for cuda")

if __name__ == "__main__" and sys.argv[1] == "gpu":
    import statistics, timeit
    SMS = 132
    def bench(fn, *a):   # a chain of 8 in one program: y feeds the next x
        chain = jax.jit(lambda x, w: functools.reduce(lambda x, _: fn(x, w), range(8), x))
        jax.block_until_ready(chain(*a))
        def run():
            for _ in range(5): out = chain(*a)
            jax.block_until_ready(out)
        return statistics.median(timeit.repeat(run, number=1, repeat=7)) / 40
    print(jax.devices()[0].device_kind, jax.__version__, flush=True)
    for dt in (jnp.bfloat16, jnp.float32):
        for N in (8192, 16384, 32768):
            M = 2**26 // N
            x = jax.random.normal(jax.random.key(0), (M, N), dt)
            w = (1 + 0.1 * jax.random.normal(jax.random.key(1), (N,))).astype(dt)
            nbytes = 2 * x.nbytes
            light = nbytes / bench(lambda x, w: x + jnp.asarray(0, x.dtype) * w[0], x, w) * 1e-9  # a copy, fused
            xla = nbytes / bench(reference, x, w) * 1e-9
            row = x.nbytes // M
            line = f"{dt.__name__} N={N}: copy {light:.0f} GB/s, XLA {xla:.0f} ({100*xla/light:.1f}%)"
            for stages in (2, 3, 4):
                for per_sm in (1, 2):
                    if (1 + stages * per_sm) * row > 220 * 1024 or (per_sm == 2 and stages > 2):
                        continue
                    try:
                        f = functools.partial(rms_fwd, programs=SMS * per_sm, stages=stages)
                        y = jax.jit(f)(x, w)
                        err = float(jnp.max(jnp.abs(y.astype(jnp.float32) - reference(x, w).astype(jnp.float32))))
                        gbs = nbytes / bench(f, x, w) * 1e-9
                        line += f" | s{stages}p{per_sm} {gbs:.0f} ({100*gbs/light:.1f}%, err {err:.1e})"
                    except Exception as e:
                        line += f" | s{stages}p{per_sm} FAILED {type(e).__name__}: {' '.join(str(e).split())[:200]}"
            print(line, flush=True)
