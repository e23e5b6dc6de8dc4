# Mosaic GPU RMSNorm, forward and backward: rows streamed in chunks through a ring of SMEM slots (TMA + barriers)
import functools, os, sys
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

LANES = 256  # a TMA copy takes at most 256 elements a dimension: a chunk of C elements is a (C // 256, 256) tile

def _interpret(interpret):
    return plgpu.InterpretGPUParams(detect_races=True, uninitialized_memory="nan") if interpret else None

def rms_norm_fwd(x, w, eps=1e-6, programs=132, chunk=2048, slots=32, lag=0, interpret=False):
    """y = x * rstd * w for x (M, N); N a multiple of chunk, chunk of 256; slots >= N // chunk."""
    M, N = x.shape
    K, T = N // chunk, chunk // LANES  # chunks a row, tile rows a chunk
    assert N % chunk == 0 and chunk % LANES == 0 and slots >= (lag + 1) * K, (N, chunk, slots, lag)
    x4, w3 = x.reshape(M, K, T, LANES), w.reshape(K, T, LANES)
    steps = pl.cdiv(M, programs)

    def kernel(x_gmem, w_gmem, y_gmem, w_smem, ring, w_bar, bars):
        p = jax.lax.axis_index("p")

        def fetch(g):  # chunk g of this program's sequence (row p + (g // K) * programs, chunk g % K) into slot g % slots
            row = p + (g // K) * programs
            @pl.when(row < M)
            def _():
                plgpu.copy_gmem_to_smem(x_gmem.at[row, g % K], ring.at[g % slots], bars.at[g % slots])

        plgpu.copy_gmem_to_smem(w_gmem, w_smem, w_bar.at[0])
        for g in range(slots):
            fetch(g)
        plgpu.barrier_wait(w_bar.at[0])

        def step(i, carry):
            row = p + i * programs
            @pl.when(row < M)
            def _():
                ss = jnp.zeros((), jnp.float32)
                for c in range(K):
                    s = (i * K + c) % slots
                    plgpu.barrier_wait(bars.at[s])
                    xc = ring[s].astype(jnp.float32)
                    ss += jnp.sum(xc * xc)
                rstd = jax.lax.rsqrt(ss / N + eps)
                for c in range(K):
                    s = (i * K + c) % slots
                    ring[s] = (ring[s].astype(jnp.float32) * rstd * w_smem[c].astype(jnp.float32)).astype(ring.dtype)
                plgpu.commit_smem()
                for c in range(K):
                    plgpu.copy_smem_to_gmem(ring.at[(i * K + c) % slots], y_gmem.at[row, c])
                refill(i)
            return carry

        def refill(i):  # once the stores of row i - lag have read its slots, refill them (the stores of the rows since
            plgpu.wait_smem_to_gmem(K * lag, wait_read_only=True)  # are still in flight)
            @pl.when(i >= lag)
            def _():
                for c in range(K):
                    fetch((i - lag) * K + c + slots)

        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.wait_smem_to_gmem(0)

    f = plgpu.kernel(
        kernel, out_type=jax.ShapeDtypeStruct(x4.shape, x.dtype),
        grid=(programs,), grid_names=("p",),
        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((slots, T, LANES), x.dtype),
                       plgpu.Barrier(num_barriers=1), plgpu.Barrier(num_barriers=slots)],
        interpret=_interpret(interpret))
    return f(x4, w3).reshape(M, N)

def rms_norm_bwd(x, w, dy, eps=1e-6, programs=132, chunk=2048, slots=16, lag=0, interpret=False):
    """(dx, dw) for y = rms_norm(x, w); each program sums its rows' dy * xhat into fp32 SMEM, then the programs' sums
    are added in program order (the same bits every run)."""
    M, N = x.shape
    K, T = N // chunk, chunk // LANES
    assert N % chunk == 0 and chunk % LANES == 0 and slots >= (lag + 1) * K, (N, chunk, slots, lag)
    x4, dy4, w3 = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES)
    steps = pl.cdiv(M, programs)

    def kernel(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, w_smem, dw_acc, xs, dys, w_bar, x_bars, dy_bars):
        p = jax.lax.axis_index("p")

        def fetch(g):
            row = p + (g // K) * programs
            @pl.when(row < M)
            def _():
                plgpu.copy_gmem_to_smem(x_gmem.at[row, g % K], xs.at[g % slots], x_bars.at[g % slots])
                plgpu.copy_gmem_to_smem(dy_gmem.at[row, g % K], dys.at[g % slots], dy_bars.at[g % slots])

        plgpu.copy_gmem_to_smem(w_gmem, w_smem, w_bar.at[0])
        for g in range(slots):
            fetch(g)
        for c in range(K):
            dw_acc[c] = jnp.zeros((T, LANES), jnp.float32)
        plgpu.barrier_wait(w_bar.at[0])

        def step(i, carry):
            row = p + i * programs
            @pl.when(row < M)
            def _():
                ss, dot = jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32)
                for c in range(K):
                    s = (i * K + c) % slots
                    plgpu.barrier_wait(x_bars.at[s])
                    plgpu.barrier_wait(dy_bars.at[s])
                    xc = xs[s].astype(jnp.float32)
                    ss += jnp.sum(xc * xc)
                    dot += jnp.sum(dys[s].astype(jnp.float32) * w_smem[c].astype(jnp.float32) * xc)
                rstd = jax.lax.rsqrt(ss / N + eps)
                k = rstd * rstd * rstd * dot / N
                for c in range(K):
                    s = (i * K + c) % slots
                    xc, dyc = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                    dw_acc[c] = dw_acc[c] + dyc * xc * rstd
                    dys[s] = (rstd * dyc * w_smem[c].astype(jnp.float32) - xc * k).astype(dys.dtype)
                plgpu.commit_smem()
                for c in range(K):
                    plgpu.copy_smem_to_gmem(dys.at[(i * K + c) % slots], dx_gmem.at[row, c])
                plgpu.wait_smem_to_gmem(K * lag, wait_read_only=True)
                @pl.when(i >= lag)
                def _():
                    for c in range(K):
                        fetch((i - lag) * K + c + slots)
            return carry

        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(dw_acc, dw_gmem.at[p])
        plgpu.wait_smem_to_gmem(0)

    f = plgpu.kernel(
        kernel, out_type=(jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((programs, K, T, LANES), jnp.float32)),
        grid=(programs,), grid_names=("p",),
        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((K, T, LANES), jnp.float32),
                       plgpu.SMEM((slots, T, LANES), x.dtype), plgpu.SMEM((slots, T, LANES), dy.dtype),
                       plgpu.Barrier(num_barriers=1), plgpu.Barrier(num_barriers=slots), plgpu.Barrier(num_barriers=slots)],
        interpret=_interpret(interpret))
    dx, dw = f(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw, axis=0).reshape(N).astype(w.dtype)

def rms_norm_bwd_split(x, w, dy, eps=1e-6, groups=66, split=2, chunk=2048, slots=8, interpret=False):
    """(dx, dw) with each row's columns split over `split` programs (a group): each sums its share of x^2 and dy w x,
    stores the pair to global memory, signals the group's other programs through global semaphores, waits for theirs,
    and adds the group's pairs in part order (the same sums in every part). Every program must be resident at once."""
    M, N = x.shape
    K, T = N // chunk, chunk // LANES
    Kq = K // split  # chunks a part
    assert N % chunk == 0 and K % split == 0 and slots >= Kq, (N, chunk, split, slots)
    x4, dy4, w3 = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES)
    steps = pl.cdiv(M, groups)

    def kernel(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, pairs_gmem, w_smem, dw_acc, xs, dys, mine, theirs,
               w_bar, x_bars, dy_bars, p_bar):
        pid = jax.lax.axis_index("p")
        g, q = pid // split, pid % split
        sems = pl.get_global(plgpu.SemaphoreType.REGULAR((groups * split,)))

        def fetch(k):  # the part's chunk k of this program's sequence
            row = g + (k // Kq) * groups
            @pl.when(row < M)
            def _():
                c = q * Kq + k % Kq
                plgpu.copy_gmem_to_smem(x_gmem.at[row, c], xs.at[k % slots], x_bars.at[k % slots])
                plgpu.copy_gmem_to_smem(dy_gmem.at[row, c], dys.at[k % slots], dy_bars.at[k % slots])

        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(q * Kq, Kq)], w_smem, w_bar.at[0])
        for k in range(slots):
            fetch(k)
        for c in range(Kq):
            dw_acc[c] = jnp.zeros((T, LANES), jnp.float32)
        plgpu.barrier_wait(w_bar.at[0])

        def step(i, carry):
            row = g + i * groups
            @pl.when(row < M)
            def _():
                ss, dot = jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32)
                for c in range(Kq):
                    s = (i * Kq + c) % slots
                    plgpu.barrier_wait(x_bars.at[s])
                    plgpu.barrier_wait(dy_bars.at[s])
                    xc = xs[s].astype(jnp.float32)
                    ss += jnp.sum(xc * xc)
                    dot += jnp.sum(dys[s].astype(jnp.float32) * w_smem[c].astype(jnp.float32) * xc)
                mine[0] = jnp.full((LANES,), ss, jnp.float32)
                mine[1] = jnp.full((LANES,), dot, jnp.float32)
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(mine, pairs_gmem.at[row, q])
                plgpu.wait_smem_to_gmem(0)  # written: then tell the group
                for other in range(1, split):
                    pl.semaphore_signal(sems.at[g * split + (q + other) % split], 1)
                pl.semaphore_wait(sems.at[pid], split - 1)
                plgpu.copy_gmem_to_smem(pairs_gmem.at[row], theirs, p_bar.at[0])
                plgpu.barrier_wait(p_bar.at[0])
                ss, dot = jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32)
                for part in range(split):  # in part order: the same sums in every program of the group
                    ss += jnp.sum(theirs[part, 0]) / LANES
                    dot += jnp.sum(theirs[part, 1]) / LANES
                rstd = jax.lax.rsqrt(ss / N + eps)
                k = rstd * rstd * rstd * dot / N
                for c in range(Kq):
                    s = (i * Kq + c) % slots
                    xc, dyc = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                    dw_acc[c] = dw_acc[c] + dyc * xc * rstd
                    dys[s] = (rstd * dyc * w_smem[c].astype(jnp.float32) - xc * k).astype(dys.dtype)
                plgpu.commit_smem()
                for c in range(Kq):
                    plgpu.copy_smem_to_gmem(dys.at[(i * Kq + c) % slots], dx_gmem.at[row, q * Kq + c])
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)
                for c in range(Kq):
                    fetch(i * Kq + c + slots)
            return carry

        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(dw_acc, dw_gmem.at[g, pl.ds(q * Kq, Kq)])
        plgpu.wait_smem_to_gmem(0)

    f = plgpu.kernel(
        kernel, out_type=(jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((groups, K, T, LANES), jnp.float32),
                          jax.ShapeDtypeStruct((M, split, 2, LANES), jnp.float32)),
        grid=(groups * split,), grid_names=("p",),
        scratch_types=[plgpu.SMEM((Kq, T, LANES), w.dtype), plgpu.SMEM((Kq, T, LANES), jnp.float32),
                       plgpu.SMEM((slots, T, LANES), x.dtype), plgpu.SMEM((slots, T, LANES), dy.dtype),
                       plgpu.SMEM((2, LANES), jnp.float32), plgpu.SMEM((split, 2, LANES), jnp.float32),
                       plgpu.Barrier(num_barriers=1), plgpu.Barrier(num_barriers=slots), plgpu.Barrier(num_barriers=slots),
                       plgpu.Barrier(num_barriers=1)],
        interpret=_interpret(interpret))
    dx, dw, _ = f(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw, axis=0).reshape(N).astype(w.dtype)

def reference_bwd(x, w, dy, eps=1e-6):
    f = lambda x, w: reference(x.astype(jnp.float64) if jax.config.jax_enable_x64 else x, w, eps)[0]
    _, vjp = jax.vjp(lambda x, w: reference(x, w, eps)[0].astype(jnp.float32), x.astype(jnp.float32), w.astype(jnp.float32))
    return vjp(dy.astype(jnp.float32))

def reference(x, w, eps=1e-6):
    xf = x.astype(jnp.float32)
    rstd = jax.lax.rsqrt(jnp.mean(xf * xf, -1) + eps)
    return (xf * rstd[:, None] * w.astype(jnp.float32)).astype(x.dtype), rstd

def races():
    from jax._src.pallas.mosaic_gpu.interpret.interpret_pallas_call import get_races
    return get_races().races_found

SPLIT_PLAN = [(64, 32768, jnp.bfloat16, 2048, 2, 8), (64, 32768, jnp.bfloat16, 2048, 4, 8), (64, 16384, jnp.bfloat16, 2048, 2, 8),
              (64, 16384, jnp.float32, 2048, 2, 8), (64, 32768, jnp.float32, 2048, 4, 8)]

if __name__ == "__main__" and sys.argv[1] == "split":
    for M, N, dt, chunk, split, slots in SPLIT_PLAN:
        x = jax.random.normal(jax.random.key(0), (M, N), dt)
        w = (1 + 0.1 * jax.random.normal(jax.random.key(1), (N,))).astype(dt)
        dy = jax.random.normal(jax.random.key(2), (M, N), dt)
        groups = 132 // split
        f = functools.partial(rms_norm_bwd_split, groups=groups, split=split, chunk=chunk, slots=slots)
        try:
            jax.jit(f).trace(x, w, dy).lower(lowering_platforms=("cuda",))
            print(dt.__name__, N, "split", split, "lowers for cuda", flush=True)
        except Exception as e:
            print(dt.__name__, N, "split", split, "FAIL", type(e).__name__, " ".join(str(e).split())[:500], flush=True)

if __name__ == "__main__" and sys.argv[1] == "cpu":
    for M, N, dt, chunk, slots, P, lag in [(11, 4096, jnp.bfloat16, 1024, 8, 4, 1), (7, 2048, jnp.float32, 512, 6, 3, 0),
                                           (13, 2048, jnp.bfloat16, 512, 12, 2, 2)]:
        x = jax.random.normal(jax.random.key(0), (M, N), dt)
        w = (1 + 0.1 * jax.random.normal(jax.random.key(1), (N,))).astype(dt)
        y = rms_norm_fwd(x, w, programs=P, chunk=chunk, slots=slots, lag=lag, interpret=True)
        yr, rr = reference(x, w)
        err = float(jnp.max(jnp.abs(y.astype(jnp.float32) - yr.astype(jnp.float32))))
        print(M, N, dt.__name__, "y err", err, "races", races(), flush=True)
        jax.jit(functools.partial(rms_norm_fwd, programs=132, chunk=chunk, slots=slots, lag=lag)).trace(x, w).lower(lowering_platforms=("cuda",))
        dy = jax.random.normal(jax.random.key(2), (M, N), dt)
        dx, dw = rms_norm_bwd(x, w, dy, programs=P, chunk=chunk, slots=slots, lag=lag, interpret=True)
        dxr, dwr = reference_bwd(x, w, dy)
        rel = lambda a, b: float(jnp.linalg.norm(a.astype(jnp.float32) - b) / jnp.linalg.norm(b))
        print("  dx rel", rel(dx, dxr), "dw rel", rel(dw, dwr), "races", races(), flush=True)
        jax.jit(functools.partial(rms_norm_bwd, programs=132, chunk=chunk, slots=slots, lag=lag)).trace(x, w, dy).lower(lowering_platforms=("cuda",))
        print("  both lower for cuda", flush=True)

if __name__ == "__main__" and sys.argv[1] == "gpu":
    import statistics, timeit
    SMS = 132
    TOTAL = int(os.environ.get("TOTAL", 2**28))  # bytes of x
    def bench(step, *a):  # a chain of 8 steps in one program, each behind an optimization barrier (no fusion across)
        chain = jax.jit(lambda *a: functools.reduce(lambda acc, _: jax.lax.optimization_barrier(step(acc, *a[1:])), range(8), a[0]))
        jax.block_until_ready(chain(*a))
        def run():
            for _ in range(3): out = chain(*a)
            jax.block_until_ready(out)
        return statistics.median(timeit.repeat(run, number=1, repeat=5)) / 24
    print(jax.devices()[0].device_kind, jax.__version__, flush=True)
    PLAN = {("bfloat16", 16384): ([(2048, 32, 0), (2048, 32, 1), (2048, 32, 2), (4096, 12, 1), (4096, 16, 2)],
                                  [(2048, 8, 0), (4096, 8, 1), (2048, 16, 1), (1024, 32, 1)]),
            ("bfloat16", 32768): ([(4096, 12, 0), (4096, 16, 1)], []),
            ("float32", 16384): ([(4096, 4, 0), (4096, 8, 1)], []),
            ("bfloat16", 8192): ([], [(2048, 4, 0), (2048, 8, 1), (1024, 16, 1), (2048, 12, 2)])}
    for (name, N), (fwds, bwds) in PLAN.items():
        dt = jnp.dtype(name)
        M = TOTAL // dt.itemsize // N
        x = jax.random.normal(jax.random.key(0), (M, N), dt)
        w = (1 + 0.1 * jax.random.normal(jax.random.key(1), (N,))).astype(dt)
        dy = jax.random.normal(jax.random.key(2), (M, N), dt)
        copy = 2 * x.nbytes / bench(lambda x, w: x + jnp.asarray(1, x.dtype), x, w) * 1e-9
        line = f"{name} N={N} M={M}: copy {copy:.0f} GB/s |"
        yr, _ = reference(x, w)
        for chunk, S, lag in fwds:
            per_sm = 1
            try:
                f = functools.partial(rms_norm_fwd, programs=SMS * per_sm, chunk=chunk, slots=S, lag=lag)
                y = jax.jit(f)(x, w)
                err = float(jnp.max(jnp.abs(y.astype(jnp.float32) - yr.astype(jnp.float32))))
                gbs = 2 * x.nbytes / bench(f, x, w) * 1e-9
                line += f" fwd c{chunk}s{S}L{lag} {100*gbs/copy:.1f}" + (f" ERR {err:.1e}" if err > 0.05 else "")
            except Exception as e:
                line += f" fwd c{chunk}s{S}L{lag} FAIL {type(e).__name__}: {' '.join(str(e).split())[:150]}"
        dxr, dwr = reference_bwd(x, w, dy)
        for chunk, S, lag in bwds:
            per_sm = 1
            try:
                f = functools.partial(rms_norm_bwd, programs=SMS * per_sm, chunk=chunk, slots=S, lag=lag)
                dx, dw = jax.jit(f)(x, w, dy)
                rel = lambda a, b: float(jnp.linalg.norm(a.astype(jnp.float32) - b) / jnp.linalg.norm(b))
                e1, e2 = rel(dx, dxr), rel(dw, dwr)
                gbs = 3 * x.nbytes / bench(lambda dy, x, w: f(x, w, dy)[0], dy, x, w) * 1e-9
                line += f" bwd c{chunk}s{S}L{lag} {100*gbs/copy:.1f} (err {e1:.1e}/{e2:.1e})"
            except Exception as e:
                line += f" bwd c{chunk}s{S}L{lag} FAIL {type(e).__name__}: {' '.join(str(e).split())[:150]}"
        print(line, flush=True)
        x = dy = y = None

if __name__ == "__main__" and sys.argv[1] == "gsplit":  # on the GPU: the split backward, right and how fast
    import statistics, timeit
    def bench(step, *a):
        chain = jax.jit(lambda *a: functools.reduce(lambda acc, _: jax.lax.optimization_barrier(step(acc, *a[1:])), range(8), a[0]))
        jax.block_until_ready(chain(*a))
        def run():
            for _ in range(3): out = chain(*a)
            jax.block_until_ready(out)
        return statistics.median(timeit.repeat(run, number=1, repeat=5)) / 24
    for _, N, dt, chunk, split, slots in SPLIT_PLAN:
        M = 2**28 // jnp.dtype(dt).itemsize // N
        x = jax.random.normal(jax.random.key(0), (M, N), dt)
        w = (1 + 0.1 * jax.random.normal(jax.random.key(1), (N,))).astype(dt)
        dy = jax.random.normal(jax.random.key(2), (M, N), dt)
        copy = 2 * x.nbytes / bench(lambda x, w: x + jnp.asarray(1, x.dtype), x, w) * 1e-9
        f = functools.partial(rms_norm_bwd_split, groups=132 // split, split=split, chunk=chunk, slots=slots)
        dx, dw = jax.jit(f)(x, w, dy)
        dxr, dwr = reference_bwd(x, w, dy)
        rel = lambda a, b: float(jnp.linalg.norm(a.astype(jnp.float32) - b) / jnp.linalg.norm(b))
        dx2, dw2 = jax.jit(f)(x, w, dy)
        gbs = 3 * x.nbytes / bench(lambda dy, x, w: f(x, w, dy)[0], dy, x, w) * 1e-9
        print(f"{jnp.dtype(dt).name} N={N} split {split} slots {slots}: dx {rel(dx, dxr):.1e} dw {rel(dw, dwr):.1e} "
              f"repeatable {bool((dx == dx2).all() and (dw == dw2).all())}; {100 * gbs / copy:.1f}% of copy", flush=True)
