# Probe (session 34): bwd_xch as a cluster of two a row swapping sums through the peer's SMEM (clu, xmode="dsmem", with commit_smem before the "written" arrive), and fwd_b (the forward with a ringful of refills after one commit_smem: xb; y in one batch: yb; w in registers: wreg). GPU: XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 60 python3 mosaic51_s34.py gpu bfloat16 16384 0 1 2
import functools, os, sys, statistics, timeit
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
ON_GPU = jax.default_backend() == "gpu"
NUM_SMS = 132
LANES = 256
INTERP = not ON_GPU
def _interpret(interpret):
    return plgpu.InterpretGPUParams(detect_races=True, uninitialized_memory="nan") if interpret else None

def _hand_over(h, wgs, sums, red, tot, part_bar, done_bar):
    @pl.when(h > 0)
    def _():
        for j, v in enumerate(sums):
            red[j, h - 1] = v
    plgpu.barrier_arrive(part_bar)
    plgpu.barrier_wait(part_bar)
    @pl.when(h == 0)
    def _():
        for j, v in enumerate(sums):
            tot[j] = jnp.sum(sum((red[j, o] for o in range(wgs - 1)), v))
        plgpu.barrier_arrive(done_bar)
    @pl.when(h > 0)
    def _():
        plgpu.barrier_wait(done_bar)
    return [tot[j] for j in range(len(sums))]

def _red_types(n, wgs, T):
    return [plgpu.SMEM((n, max(wgs - 1, 1), T, LANES), jnp.float32), plgpu.SMEM((n,), jnp.float32),
            plgpu.Barrier(num_arrivals=wgs), plgpu.Barrier()]

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "outs", "interpret"))
def fwd_reg(x, w, *, eps, programs, wgs, chunk, slots, outs, interpret=False):
    """x kept in registers: a slot is refilled as soon as its chunk is read, y goes out through `outs` slots."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // wgs
    assert N % chunk == 0 and K % wgs == 0
    x4, w3 = x.reshape(M, K, T, LANES), w.reshape(K, T, LANES)

    def body(x_gmem, w_gmem, y_gmem, w_smem, ring, ybuf, w_bar, bars, red, tot, part_bar, done_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
        n_mine = (M - p + programs - 1) // programs
        def fetch(k):
            row = p + (k // Kh) * programs
            @pl.when(row < M)
            def _():
                s = h * slots + k % slots
                plgpu.copy_gmem_to_smem(x_gmem.at[row, h * Kh + k % Kh], ring.at[s], bars.at[s])
        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(h * Kh, Kh)], w_smem.at[pl.ds(h * Kh, Kh)], w_bar.at[h])
        for k in range(slots):
            fetch(k)
        plgpu.barrier_wait(w_bar.at[h])
        def step(i, carry):
            row = p + i * programs
            xs, sq = [], 0.0
            for c in range(Kh):
                k = i * Kh + c
                s = h * slots + k % slots
                plgpu.barrier_wait(bars.at[s])
                x_c = ring[s]
                xs.append(x_c)
                xf = x_c.astype(jnp.float32)
                sq = sq + xf * xf
                plgpu.commit_smem()
                fetch(k + slots)
            (sum_sq,) = _hand_over(h, wgs, (sq,), red, tot, part_bar, done_bar)
            rstd = jax.lax.rsqrt(sum_sq / N + eps)
            for c in range(Kh):
                o = h * outs + (i * Kh + c) % outs
                plgpu.wait_smem_to_gmem(outs - 1, wait_read_only=True)
                ybuf[o] = (xs[c].astype(jnp.float32) * rstd * w_smem[h * Kh + c].astype(jnp.float32)).astype(ybuf.dtype)
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(ybuf.at[o], y_gmem.at[row, h * Kh + c])
            return carry
        jax.lax.fori_loop(0, n_mine, step, 0)
        plgpu.wait_smem_to_gmem(0)

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x4.shape, x.dtype), grid=(programs,), grid_names=("p",),
                        num_threads=wgs, thread_name="wg",
                        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((wgs * slots, T, LANES), x.dtype),
                                       plgpu.SMEM((wgs * outs, T, LANES), x.dtype),
                                       plgpu.Barrier(num_barriers=wgs), plgpu.Barrier(num_barriers=wgs * slots)] + _red_types(1, wgs, T),
                        interpret=_interpret(interpret))(x4, w3).reshape(M, N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "outs", "xb", "yb", "wreg", "interpret"))
def fwd_b(x, w, *, eps, programs, wgs, chunk, slots, outs, xb=True, yb=True, wreg=False, interpret=False):
    """fwd_reg with fewer fences: xb: the row's slots refilled after one commit_smem (not one a chunk); yb: all of a
    warpgroup's y chunks of a row written, one commit_smem, then their stores (outs must be Kh); wreg: w in registers."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // wgs
    assert N % chunk == 0 and K % wgs == 0 and (not yb or outs == Kh) and (not xb or slots >= Kh)
    x4, w3 = x.reshape(M, K, T, LANES), w.reshape(K, T, LANES)

    def body(x_gmem, w_gmem, y_gmem, w_smem, ring, ybuf, w_bar, bars, red, tot, part_bar, done_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
        n_mine = (M - p + programs - 1) // programs
        def fetch(k):
            row = p + (k // Kh) * programs
            @pl.when(row < M)
            def _():
                s = h * slots + k % slots
                plgpu.copy_gmem_to_smem(x_gmem.at[row, h * Kh + k % Kh], ring.at[s], bars.at[s])
        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(h * Kh, Kh)], w_smem.at[pl.ds(h * Kh, Kh)], w_bar.at[h])
        for k in range(slots):
            fetch(k)
        plgpu.barrier_wait(w_bar.at[h])
        wr = [w_smem[h * Kh + c].astype(jnp.float32) for c in range(Kh)] if wreg else None
        def step(i, carry):
            row = p + i * programs
            xs, sq = [], 0.0
            for c in range(Kh):
                k = i * Kh + c
                s = h * slots + k % slots
                plgpu.barrier_wait(bars.at[s])
                x_c = ring[s]
                xs.append(x_c)
                xf = x_c.astype(jnp.float32)
                sq = sq + xf * xf
                if not xb:
                    plgpu.commit_smem()
                    fetch(k + slots)
            if xb:
                plgpu.commit_smem()
                for c in range(Kh):
                    fetch(i * Kh + c + slots)
            (sum_sq,) = _hand_over(h, wgs, (sq,), red, tot, part_bar, done_bar)
            rstd = jax.lax.rsqrt(sum_sq / N + eps)
            wc = lambda c: wr[c] if wreg else w_smem[h * Kh + c].astype(jnp.float32)
            if yb:
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)
                for c in range(Kh):
                    ybuf[h * outs + c] = (xs[c].astype(jnp.float32) * rstd * wc(c)).astype(ybuf.dtype)
                plgpu.commit_smem()
                for c in range(Kh):
                    plgpu.copy_smem_to_gmem(ybuf.at[h * outs + c], y_gmem.at[row, h * Kh + c])
            else:
                for c in range(Kh):
                    o = h * outs + (i * Kh + c) % outs
                    plgpu.wait_smem_to_gmem(outs - 1, wait_read_only=True)
                    ybuf[o] = (xs[c].astype(jnp.float32) * rstd * wc(c)).astype(ybuf.dtype)
                    plgpu.commit_smem()
                    plgpu.copy_smem_to_gmem(ybuf.at[o], y_gmem.at[row, h * Kh + c])
            return carry
        jax.lax.fori_loop(0, n_mine, step, 0)
        plgpu.wait_smem_to_gmem(0)

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x4.shape, x.dtype), grid=(programs,), grid_names=("p",),
                        num_threads=wgs, thread_name="wg",
                        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((wgs * slots, T, LANES), x.dtype),
                                       plgpu.SMEM((wgs * outs, T, LANES), x.dtype),
                                       plgpu.Barrier(num_barriers=wgs), plgpu.Barrier(num_barriers=wgs * slots)] + _red_types(1, wgs, T),
                        interpret=_interpret(interpret))(x4, w3).reshape(M, N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "lag", "interpret"))
def fwd_wgn(x, w, *, eps, programs, wgs, chunk, slots, lag, interpret=False):
    """Session 31's best: the row stays in SMEM until its y is out."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // wgs
    assert N % chunk == 0 and K % wgs == 0 and slots >= (lag + 1) * Kh
    x4, w3 = x.reshape(M, K, T, LANES), w.reshape(K, T, LANES)

    def body(x_gmem, w_gmem, y_gmem, w_smem, ring, w_bar, bars, red, tot, part_bar, done_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
        n_mine = (M - p + programs - 1) // programs
        def fetch(g):
            row = p + (g // Kh) * programs
            @pl.when(row < M)
            def _():
                s = h * slots + g % slots
                plgpu.copy_gmem_to_smem(x_gmem.at[row, h * Kh + g % Kh], ring.at[s], bars.at[s])
        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(h * Kh, Kh)], w_smem.at[pl.ds(h * Kh, Kh)], w_bar.at[h])
        for g in range(slots):
            fetch(g)
        plgpu.barrier_wait(w_bar.at[h])
        def step(i, carry):
            row = p + i * programs
            sq = 0.0
            for c in range(Kh):
                s = h * slots + (i * Kh + c) % slots
                plgpu.barrier_wait(bars.at[s])
                x_c = ring[s].astype(jnp.float32)
                sq = sq + x_c * x_c
            (sum_sq,) = _hand_over(h, wgs, (sq,), red, tot, part_bar, done_bar)
            rstd = jax.lax.rsqrt(sum_sq / N + eps)
            for c in range(Kh):
                s = h * slots + (i * Kh + c) % slots
                ring[s] = (ring[s].astype(jnp.float32) * rstd * w_smem[h * Kh + c].astype(jnp.float32)).astype(ring.dtype)
            plgpu.commit_smem()
            for c in range(Kh):
                plgpu.copy_smem_to_gmem(ring.at[h * slots + (i * Kh + c) % slots], y_gmem.at[row, h * Kh + c])
            plgpu.wait_smem_to_gmem(Kh * lag, wait_read_only=True)
            @pl.when(i >= lag)
            def _():
                for c in range(Kh):
                    fetch((i - lag) * Kh + c + slots)
            return carry
        jax.lax.fori_loop(0, n_mine, step, 0)
        plgpu.wait_smem_to_gmem(0)

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x4.shape, x.dtype), grid=(programs,), grid_names=("p",),
                        num_threads=wgs, thread_name="wg",
                        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((wgs * slots, T, LANES), x.dtype),
                                       plgpu.Barrier(num_barriers=wgs), plgpu.Barrier(num_barriers=wgs * slots)] + _red_types(1, wgs, T),
                        interpret=_interpret(interpret))(x4, w3).reshape(M, N)

def _store_dw(h, p, Kh, dw, red, dw_gmem):
    """dw out through the hand-over buffer, free once the last row's sums were read: warpgroup h's stage is red[h % 2, h // 2]."""
    stage = red.at[h % 2, h // 2]
    for c in range(Kh):
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)
        stage[...] = dw[c]
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(stage, dw_gmem.at[p, h * Kh + c])
    plgpu.wait_smem_to_gmem(0)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "lag", "interpret"))
def bwd_wgr2(x, w, dy, *, eps, programs, wgs, chunk, slots, lag, interpret=False):
    """Rows in SMEM until dx is out, dw in registers, dw's stage in the hand-over buffer."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // wgs
    assert N % chunk == 0 and K % wgs == 0 and slots >= (lag + 1) * Kh and wgs >= 2
    x4, dy4, w3 = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES)

    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, w_smem, xs, dys, w_bar, x_bars, dy_bars, red, tot, part_bar, done_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
        n_mine = (M - p + programs - 1) // programs
        def fetch(k):
            row = p + (k // Kh) * programs
            @pl.when(row < M)
            def _():
                c, s = h * Kh + k % Kh, h * slots + k % slots
                plgpu.copy_gmem_to_smem(x_gmem.at[row, c], xs.at[s], x_bars.at[s])
                plgpu.copy_gmem_to_smem(dy_gmem.at[row, c], dys.at[s], dy_bars.at[s])
        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(h * Kh, Kh)], w_smem.at[pl.ds(h * Kh, Kh)], w_bar.at[h])
        for k in range(slots):
            fetch(k)
        plgpu.barrier_wait(w_bar.at[h])
        def step(i, dw):
            row = p + i * programs
            sq, gx = 0.0, 0.0
            for c in range(Kh):
                s = h * slots + (i * Kh + c) % slots
                plgpu.barrier_wait(x_bars.at[s])
                plgpu.barrier_wait(dy_bars.at[s])
                x_c = xs[s].astype(jnp.float32)
                sq = sq + x_c * x_c
                gx = gx + dys[s].astype(jnp.float32) * w_smem[h * Kh + c].astype(jnp.float32) * x_c
            sum_sq, sum_gx = _hand_over(h, wgs, (sq, gx), red, tot, part_bar, done_bar)
            rstd = jax.lax.rsqrt(sum_sq / N + eps)
            k = rstd * rstd * rstd * sum_gx / N
            dw = list(dw)
            for c in range(Kh):
                s = h * slots + (i * Kh + c) % slots
                x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                dw[c] = dw[c] + dy_c * x_c * rstd
                dys[s] = (rstd * dy_c * w_smem[h * Kh + c].astype(jnp.float32) - x_c * k).astype(dys.dtype)
            plgpu.commit_smem()
            for c in range(Kh):
                plgpu.copy_smem_to_gmem(dys.at[h * slots + (i * Kh + c) % slots], dx_gmem.at[row, h * Kh + c])
            plgpu.wait_smem_to_gmem(Kh * lag, wait_read_only=True)
            @pl.when(i >= lag)
            def _():
                for c in range(Kh):
                    fetch((i - lag) * Kh + c + slots)
            return tuple(dw)
        dw = jax.lax.fori_loop(0, n_mine, step, tuple(jnp.zeros((T, LANES), jnp.float32) for _ in range(Kh)))
        _store_dw(h, p, Kh, dw, red, dw_gmem)

    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((programs, K, T, LANES), jnp.float32))
    dx, dw_partial = plgpu.kernel(
        body, out_type=out_type, grid=(programs,), grid_names=("p",), num_threads=wgs, thread_name="wg",
        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype),
                       plgpu.SMEM((wgs * slots, T, LANES), x.dtype), plgpu.SMEM((wgs * slots, T, LANES), dy.dtype),
                       plgpu.Barrier(num_barriers=wgs), plgpu.Barrier(num_barriers=wgs * slots), plgpu.Barrier(num_barriers=wgs * slots)]
                      + _red_types(2, wgs, T),
        interpret=_interpret(interpret))(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "interpret"))
def bwd_rrr(x, w, dy, *, eps, programs, wgs, chunk, slots, interpret=False):
    """Each row read twice (pass 2 from L2), dw in registers, w in SMEM."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // wgs
    assert N % chunk == 0 and K % wgs == 0 and slots >= 2 and wgs >= 2
    x4, dy4, w3 = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES)

    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, w_smem, xs, dys, w_bar, x_bars, dy_bars, red, tot, part_bar, done_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
        n_mine = (M - p + programs - 1) // programs
        def fetch(k):
            row = p + (k // (2 * Kh)) * programs
            @pl.when(row < M)
            def _():
                s, c = h * slots + k % slots, h * Kh + k % Kh
                plgpu.copy_gmem_to_smem(x_gmem.at[row, c], xs.at[s], x_bars.at[s])
                plgpu.copy_gmem_to_smem(dy_gmem.at[row, c], dys.at[s], dy_bars.at[s])
        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(h * Kh, Kh)], w_smem.at[pl.ds(h * Kh, Kh)], w_bar.at[h])
        for k in range(slots):
            fetch(k)
        plgpu.barrier_wait(w_bar.at[h])
        def step(i, dw):
            row, base = p + i * programs, i * 2 * Kh
            sq, gx = 0.0, 0.0
            for c in range(Kh):
                s = h * slots + (base + c) % slots
                plgpu.barrier_wait(x_bars.at[s])
                plgpu.barrier_wait(dy_bars.at[s])
                x_c = xs[s].astype(jnp.float32)
                sq = sq + x_c * x_c
                gx = gx + dys[s].astype(jnp.float32) * w_smem[h * Kh + c].astype(jnp.float32) * x_c
                plgpu.commit_smem()
                fetch(base + c + slots)
            sum_sq, sum_gx = _hand_over(h, wgs, (sq, gx), red, tot, part_bar, done_bar)
            rstd = jax.lax.rsqrt(sum_sq / N + eps)
            k = rstd * rstd * rstd * sum_gx / N
            dw = list(dw)
            for c in range(Kh):
                s = h * slots + (base + Kh + c) % slots
                plgpu.barrier_wait(x_bars.at[s])
                plgpu.barrier_wait(dy_bars.at[s])
                x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                dw[c] = dw[c] + dy_c * x_c * rstd
                dys[s] = (rstd * dy_c * w_smem[h * Kh + c].astype(jnp.float32) - x_c * k).astype(dys.dtype)
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(dys.at[s], dx_gmem.at[row, h * Kh + c])
                if c > 0:
                    plgpu.wait_smem_to_gmem(1, wait_read_only=True)
                    fetch(base + Kh + c - 1 + slots)
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)
            fetch(base + 2 * Kh - 1 + slots)
            return tuple(dw)
        dw = jax.lax.fori_loop(0, n_mine, step, tuple(jnp.zeros((T, LANES), jnp.float32) for _ in range(Kh)))
        _store_dw(h, p, Kh, dw, red, dw_gmem)

    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((programs, K, T, LANES), jnp.float32))
    dx, dw_partial = plgpu.kernel(
        body, out_type=out_type, grid=(programs,), grid_names=("p",), num_threads=wgs, thread_name="wg",
        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype),
                       plgpu.SMEM((wgs * slots, T, LANES), x.dtype), plgpu.SMEM((wgs * slots, T, LANES), dy.dtype),
                       plgpu.Barrier(num_barriers=wgs), plgpu.Barrier(num_barriers=wgs * slots), plgpu.Barrier(num_barriers=wgs * slots)]
                      + _red_types(2, wgs, T),
        interpret=_interpret(interpret))(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "parts", "chunk", "slots", "interpret"))
def bwd_prt(x, w, dy, *, eps, programs, wgs, parts, chunk, slots, interpret=False):
    """`parts` programs a row: each reads the whole row for the two sums, then its own N / parts columns again (from
    L2) for dx and dw; dw in registers (N / parts / (128 wgs) fp32 a thread); no exchange between the parts."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    K1, K2 = K // wgs, K // (parts * wgs)  # a warpgroup's chunks of a row: pass 1, pass 2
    L = K1 + K2
    groups = programs // parts
    assert N % chunk == 0 and K % (wgs * parts) == 0 and slots >= 2 and wgs >= 2 and programs % parts == 0
    x4, dy4, w3 = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES)

    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, w_smem, xs, dys, w_bar, x_bars, dy_bars, red, tot, part_bar, done_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
        g, q = p // parts, p % parts
        n_mine = (M - g + groups - 1) // groups
        def col(j):  # the warpgroup's j-th load of a row: its pass-1 chunks, then its pass-2 chunks
            return h * K1 + j if j < K1 else q * (K // parts) + h * K2 + (j - K1)
        def fetch(i, c):  # load c (static, may run into the next rows) counted from row i's first
            i, j = i + c // L, c % L
            row = g + i * groups
            @pl.when(row < M)
            def _():
                s = h * slots + (i * L + j) % slots
                plgpu.copy_gmem_to_smem(x_gmem.at[row, col(j)], xs.at[s], x_bars.at[s])
                plgpu.copy_gmem_to_smem(dy_gmem.at[row, col(j)], dys.at[s], dy_bars.at[s])
        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(h * K1, K1)], w_smem.at[pl.ds(h * K1, K1)], w_bar.at[h])
        for c in range(slots):
            fetch(0, c)
        plgpu.barrier_wait(w_bar.at[h])
        def step(i, dw):
            row = g + i * groups
            sq, gx = 0.0, 0.0
            for c in range(K1):
                s = h * slots + (i * L + c) % slots
                plgpu.barrier_wait(x_bars.at[s])
                plgpu.barrier_wait(dy_bars.at[s])
                x_c = xs[s].astype(jnp.float32)
                sq = sq + x_c * x_c
                gx = gx + dys[s].astype(jnp.float32) * w_smem[h * K1 + c].astype(jnp.float32) * x_c
                plgpu.commit_smem()
                fetch(i, c + slots)
            sum_sq, sum_gx = _hand_over(h, wgs, (sq, gx), red, tot, part_bar, done_bar)
            rstd = jax.lax.rsqrt(sum_sq / N + eps)
            k = rstd * rstd * rstd * sum_gx / N
            dw = list(dw)
            for c in range(K2):
                s = h * slots + (i * L + K1 + c) % slots
                plgpu.barrier_wait(x_bars.at[s])
                plgpu.barrier_wait(dy_bars.at[s])
                x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                dw[c] = dw[c] + dy_c * x_c * rstd
                dys[s] = (rstd * dy_c * w_smem[col(K1 + c)].astype(jnp.float32) - x_c * k).astype(dys.dtype)
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(dys.at[s], dx_gmem.at[row, col(K1 + c)])
                if c > 0:
                    plgpu.wait_smem_to_gmem(1, wait_read_only=True)
                    fetch(i, K1 + c - 1 + slots)
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)
            fetch(i, L - 1 + slots)
            return tuple(dw)
        dw = jax.lax.fori_loop(0, n_mine, step, tuple(jnp.zeros((T, LANES), jnp.float32) for _ in range(K2)))
        stage = red.at[h % 2, h // 2]
        for c in range(K2):
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)
            stage[...] = dw[c]
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(stage, dw_gmem.at[g, col(K1 + c)])
        plgpu.wait_smem_to_gmem(0)

    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((groups, K, T, LANES), jnp.float32))
    dx, dw_partial = plgpu.kernel(
        body, out_type=out_type, grid=(programs,), grid_names=("p",), num_threads=wgs, thread_name="wg",
        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype),
                       plgpu.SMEM((wgs * slots, T, LANES), x.dtype), plgpu.SMEM((wgs * slots, T, LANES), dy.dtype),
                       plgpu.Barrier(num_barriers=wgs), plgpu.Barrier(num_barriers=wgs * slots), plgpu.Barrier(num_barriers=wgs * slots)]
                      + _red_types(2, wgs, T),
        interpret=_interpret(interpret))(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "outs", "interpret"))
def fwd_pipe(x, w, *, eps, programs, wgs, chunk, slots, outs, interpret=False):
    """fwd_reg with the hand-over's wait moved past the previous row's y: row i's sums are handed over, then row i-1's y
    is written (its x carried in registers), then the wait; totals double-buffered by row parity."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // wgs
    assert N % chunk == 0 and K % wgs == 0
    x4, w3 = x.reshape(M, K, T, LANES), w.reshape(K, T, LANES)

    def body(x_gmem, w_gmem, y_gmem, w_smem, ring, ybuf, w_bar, bars, red, tot, part_bar, done_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
        n_mine = (M - p + programs - 1) // programs
        def fetch(k):
            row = p + (k // Kh) * programs
            @pl.when(row < M)
            def _():
                s = h * slots + k % slots
                plgpu.copy_gmem_to_smem(x_gmem.at[row, h * Kh + k % Kh], ring.at[s], bars.at[s])
        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(h * Kh, Kh)], w_smem.at[pl.ds(h * Kh, Kh)], w_bar.at[h])
        for k in range(slots):
            fetch(k)
        plgpu.barrier_wait(w_bar.at[h])
        def write_y(i, xs, rstd):  # row i's y from its x in registers
            row = p + i * programs
            for c in range(Kh):
                o = h * outs + (i * Kh + c) % outs
                plgpu.wait_smem_to_gmem(outs - 1, wait_read_only=True)
                ybuf[o] = (xs[c].astype(jnp.float32) * rstd * w_smem[h * Kh + c].astype(jnp.float32)).astype(ybuf.dtype)
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(ybuf.at[o], y_gmem.at[row, h * Kh + c])
        def step(i, carry):
            prev, prev_rstd = carry
            xs, sq = [], 0.0
            for c in range(Kh):
                k = i * Kh + c
                s = h * slots + k % slots
                plgpu.barrier_wait(bars.at[s])
                x_c = ring[s]
                xs.append(x_c)
                xf = x_c.astype(jnp.float32)
                sq = sq + xf * xf
                plgpu.commit_smem()
                fetch(k + slots)
            b = i % 2
            @pl.when(h > 0)
            def _():
                red[0, h - 1] = sq
            plgpu.barrier_arrive(part_bar)
            @pl.when(i > 0)
            def _():
                write_y(i - 1, prev, prev_rstd)
            plgpu.barrier_wait(part_bar)
            @pl.when(h == 0)
            def _():
                tot[b] = jnp.sum(sum((red[0, o] for o in range(wgs - 1)), sq))
                plgpu.barrier_arrive(done_bar)
            @pl.when(h > 0)
            def _():
                plgpu.barrier_wait(done_bar)
            rstd = jax.lax.rsqrt(tot[b] / N + eps)
            return tuple(xs), rstd
        init = (tuple(jnp.zeros((T, LANES), x.dtype) for _ in range(Kh)), jnp.float32(0))
        last, last_rstd = jax.lax.fori_loop(0, n_mine, step, init)
        @pl.when(n_mine > 0)
        def _():
            write_y(n_mine - 1, last, last_rstd)
        plgpu.wait_smem_to_gmem(0)

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x4.shape, x.dtype), grid=(programs,), grid_names=("p",),
                        num_threads=wgs, thread_name="wg",
                        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((wgs * slots, T, LANES), x.dtype),
                                       plgpu.SMEM((wgs * outs, T, LANES), x.dtype),
                                       plgpu.Barrier(num_barriers=wgs), plgpu.Barrier(num_barriers=wgs * slots),
                                       plgpu.SMEM((1, max(wgs - 1, 1), T, LANES), jnp.float32), plgpu.SMEM((2,), jnp.float32),
                                       plgpu.Barrier(num_arrivals=wgs), plgpu.Barrier()],
                        interpret=_interpret(interpret))(x4, w3).reshape(M, N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "lag", "xmode", "clu", "interpret"))
def bwd_xch(x, w, dy, *, eps, programs, wgs, chunk, slots, lag, xmode="full", clu=False, interpret=False):
    """Two programs a row, each only its half of the columns (x, dy in SMEM until dx is out, dw in registers); the
    halves' two sums exchanged through global memory: warpgroup 0 stores its program's, signals the partner's
    semaphore, waits on its own, loads both and adds them in part order (the same bits in both parts). With lag 1
    the next row's loads are in flight during the exchange. Every program must be resident (programs <= SMs).
    The interpreter has no global semaphores: GPU only."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kq = K // 2
    Kh = Kq // wgs
    groups = programs // 2
    assert N % (2 * wgs * chunk) == 0 and slots >= (lag + 1) * Kh and programs % 2 == 0 and wgs >= 2
    x4, dy4, w3 = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES)

    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, sums_gmem, w_smem, xs, dys, w_bar, x_bars, dy_bars,
             red, tot, part_bar, done_bar, mine, both, sums_bar, *xbar):
        h = jax.lax.axis_index("wg")
        if clu:  # each pair a cluster of two: co-scheduled by the hardware, so no pair waits for an SM held by another
            g, q = jax.lax.axis_index("g"), jax.lax.axis_index("c")
            p = 2 * g + q
        else:
            p = jax.lax.axis_index("p")
            g, q = p // 2, p % 2
        first = q * Kq + h * Kh  # the warpgroup's first chunk of a row
        sems = pl.get_global(plgpu.SemaphoreType.REGULAR((programs,)))
        n_mine = (M - g + groups - 1) // groups
        def fetch(k):
            row = g + (k // Kh) * groups
            @pl.when(row < M)
            def _():
                c, s = first + k % Kh, h * slots + k % slots
                plgpu.copy_gmem_to_smem(x_gmem.at[row, c], xs.at[s], x_bars.at[s])
                plgpu.copy_gmem_to_smem(dy_gmem.at[row, c], dys.at[s], dy_bars.at[s])
        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(first, Kh)], w_smem.at[pl.ds(h * Kh, Kh)], w_bar.at[h])
        for k in range(slots):
            fetch(k)
        plgpu.barrier_wait(w_bar.at[h])
        def step(i, dw):
            row = g + i * groups
            sq, gx = 0.0, 0.0
            for c in range(Kh):
                s = h * slots + (i * Kh + c) % slots
                plgpu.barrier_wait(x_bars.at[s])
                plgpu.barrier_wait(dy_bars.at[s])
                x_c = xs[s].astype(jnp.float32)
                sq = sq + x_c * x_c
                gx = gx + dys[s].astype(jnp.float32) * w_smem[h * Kh + c].astype(jnp.float32) * x_c
            @pl.when(h > 0)
            def _():
                red[0, h - 1] = sq
                red[1, h - 1] = gx
            plgpu.barrier_arrive(part_bar)
            plgpu.barrier_wait(part_bar)
            @pl.when(h == 0)
            def _():
                half_sq = jnp.sum(sum((red[0, o] for o in range(wgs - 1)), sq))
                half_gx = jnp.sum(sum((red[1, o] for o in range(wgs - 1)), gx))
                if xmode == "dsmem":  # pubs hold this half's sums; the peer reads them from this SMEM
                    pubs, cbar = (mine, both), xbar[0]
                    @pl.when(i > 0)
                    def _():
                        plgpu.barrier_wait(cbar.at[1])  # the peer has read the last row's
                    pubs[0][...] = jnp.full((LANES,), half_sq, jnp.float32)
                    pubs[1][...] = jnp.full((LANES,), half_gx, jnp.float32)
                    plgpu.commit_smem()  # bar.sync of the warpgroup: every thread's writes before the arrive
                    plgpu.barrier_arrive(cbar.at[0])  # cluster barrier: both halves written
                    plgpu.barrier_wait(cbar.at[0])
                    theirs = [jnp.sum(plgpu.cluster_ref(pub, {"c": 1 - q})[...]) for pub in pubs]
                    plgpu.barrier_arrive(cbar.at[1])
                    for j, v in enumerate((half_sq, half_gx)):
                        a_, b_ = jnp.sum(pubs[j][...]), theirs[j]
                        tot[j] = (a_ + b_) / LANES  # a + b is b + a, bit for bit: both programs agree
                if xmode != "dsmem":
                    mine[0] = jnp.full((LANES,), half_sq, jnp.float32)
                    mine[1] = jnp.full((LANES,), half_gx, jnp.float32)
                if xmode in ("full", "store"):
                    plgpu.commit_smem()
                    plgpu.copy_smem_to_gmem(mine, sums_gmem.at[row, q])
                    plgpu.wait_smem_to_gmem(0)  # written, then the partner is told
                if xmode in ("full", "sem"):
                    pl.semaphore_signal(sems.at[g * 2 + 1 - q], 1)
                    pl.semaphore_wait(sems.at[p], 1)
                if xmode == "full":
                    plgpu.copy_gmem_to_smem(sums_gmem.at[row], both, sums_bar)
                    plgpu.barrier_wait(sums_bar)
                    tot[0] = (jnp.sum(both[0, 0]) + jnp.sum(both[1, 0])) / LANES
                    tot[1] = (jnp.sum(both[0, 1]) + jnp.sum(both[1, 1])) / LANES
                elif xmode != "dsmem":
                    tot[0] = 2 * half_sq
                    tot[1] = 2 * half_gx
                plgpu.barrier_arrive(done_bar)
            @pl.when(h > 0)
            def _():
                plgpu.barrier_wait(done_bar)
            rstd = jax.lax.rsqrt(tot[0] / N + eps)
            k = rstd * rstd * rstd * tot[1] / N
            dw = list(dw)
            for c in range(Kh):
                s = h * slots + (i * Kh + c) % slots
                x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                dw[c] = dw[c] + dy_c * x_c * rstd
                dys[s] = (rstd * dy_c * w_smem[h * Kh + c].astype(jnp.float32) - x_c * k).astype(dys.dtype)
            plgpu.commit_smem()
            for c in range(Kh):
                plgpu.copy_smem_to_gmem(dys.at[h * slots + (i * Kh + c) % slots], dx_gmem.at[row, first + c])
            plgpu.wait_smem_to_gmem(Kh * lag, wait_read_only=True)
            @pl.when(i >= lag)
            def _():
                for c in range(Kh):
                    fetch((i - lag) * Kh + c + slots)
            return tuple(dw)
        dw = jax.lax.fori_loop(0, n_mine, step, tuple(jnp.zeros((T, LANES), jnp.float32) for _ in range(Kh)))
        if xmode == "dsmem":
            @pl.when((h == 0) & (n_mine > 0))
            def _():
                plgpu.barrier_wait(xbar[0].at[1])  # the peer has read this SMEM for the last time: it may go
        stage = red.at[h % 2, h // 2]
        for c in range(Kh):
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)
            stage[...] = dw[c]
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(stage, dw_gmem.at[g, first + c])
        plgpu.wait_smem_to_gmem(0)

    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((groups, K, T, LANES), jnp.float32),
                jax.ShapeDtypeStruct((M, 2, 2, LANES), jnp.float32))
    dx, dw_partial, _ = plgpu.kernel(
        body, out_type=out_type, num_threads=wgs, thread_name="wg",
        **(dict(grid=(groups,), grid_names=("g",), cluster=(2,), cluster_names=("c",)) if clu else dict(grid=(programs,), grid_names=("p",))),
        scratch_types=[plgpu.SMEM((Kq, T, LANES), w.dtype),
                       plgpu.SMEM((wgs * slots, T, LANES), x.dtype), plgpu.SMEM((wgs * slots, T, LANES), dy.dtype),
                       plgpu.Barrier(num_barriers=wgs), plgpu.Barrier(num_barriers=wgs * slots), plgpu.Barrier(num_barriers=wgs * slots)]
                      + _red_types(2, wgs, T)
                      + ([plgpu.SMEM((LANES,), jnp.float32), plgpu.SMEM((LANES,), jnp.float32), plgpu.Barrier(),
                          plgpu.ClusterBarrier(collective_axes=("c",), num_barriers=2)] if xmode == "dsmem" else
                         [plgpu.SMEM((2, LANES), jnp.float32), plgpu.SMEM((2, 2, LANES), jnp.float32), plgpu.Barrier()]),
        interpret=_interpret(interpret))(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "interpret"))
def bwd_xch2(x, w, dy, *, eps, programs, wgs, chunk, slots, interpret=False):
    """bwd_xch, software-pipelined: row i+1's half sums are posted before row i's partner sums are awaited, so the
    exchange's round trip overlaps the next row's first pass. Two rows of slots (row i+2 loads into row i's once
    its dx is read out). GPU only (global semaphores)."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kq = K // 2
    Kh = Kq // wgs
    groups = programs // 2
    assert N % (2 * wgs * chunk) == 0 and slots >= 2 * Kh and programs % 2 == 0 and wgs >= 2
    x4, dy4, w3 = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES)

    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, sums_gmem, w_smem, xs, dys, w_bar, x_bars, dy_bars,
             red, tot, part_bar, done_bar, mine, both, sums_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
        g, q = p // 2, p % 2
        first = q * Kq + h * Kh
        sems = pl.get_global(plgpu.SemaphoreType.REGULAR((programs,)))
        n_mine = (M - g + groups - 1) // groups
        def fetch(k):
            row = g + (k // Kh) * groups
            @pl.when(row < M)
            def _():
                c, s = first + k % Kh, h * slots + k % slots
                plgpu.copy_gmem_to_smem(x_gmem.at[row, c], xs.at[s], x_bars.at[s])
                plgpu.copy_gmem_to_smem(dy_gmem.at[row, c], dys.at[s], dy_bars.at[s])
        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(first, Kh)], w_smem.at[pl.ds(h * Kh, Kh)], w_bar.at[h])
        for k in range(slots):
            fetch(k)
        plgpu.barrier_wait(w_bar.at[h])
        def post(i):  # row i's half sums: warpgroups -> warpgroup 0 -> global memory, then the partner is told
            row = g + i * groups
            sq, gx = 0.0, 0.0
            for c in range(Kh):
                s = h * slots + (i * Kh + c) % slots
                plgpu.barrier_wait(x_bars.at[s])
                plgpu.barrier_wait(dy_bars.at[s])
                x_c = xs[s].astype(jnp.float32)
                sq = sq + x_c * x_c
                gx = gx + dys[s].astype(jnp.float32) * w_smem[h * Kh + c].astype(jnp.float32) * x_c
            @pl.when(h > 0)
            def _():
                red[0, h - 1] = sq
                red[1, h - 1] = gx
            plgpu.barrier_arrive(part_bar)
            plgpu.barrier_wait(part_bar)
            @pl.when(h == 0)
            def _():
                mine[0] = jnp.full((LANES,), jnp.sum(sum((red[0, o] for o in range(wgs - 1)), sq)), jnp.float32)
                mine[1] = jnp.full((LANES,), jnp.sum(sum((red[1, o] for o in range(wgs - 1)), gx)), jnp.float32)
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(mine, sums_gmem.at[row, q])
                plgpu.wait_smem_to_gmem(0)
                pl.semaphore_signal(sems.at[g * 2 + 1 - q], 1)
        post(0)
        def step(i, dw):
            row = g + i * groups
            @pl.when(i + 1 < n_mine)
            def _():
                post(i + 1)
            b = i % 2
            @pl.when(h == 0)
            def _():
                pl.semaphore_wait(sems.at[p], 1)
                plgpu.copy_gmem_to_smem(sums_gmem.at[row], both, sums_bar)
                plgpu.barrier_wait(sums_bar)
                tot[b, 0] = (jnp.sum(both[0, 0]) + jnp.sum(both[1, 0])) / LANES
                tot[b, 1] = (jnp.sum(both[0, 1]) + jnp.sum(both[1, 1])) / LANES
                plgpu.barrier_arrive(done_bar)
            @pl.when(h > 0)
            def _():
                plgpu.barrier_wait(done_bar)
            rstd = jax.lax.rsqrt(tot[b, 0] / N + eps)
            k = rstd * rstd * rstd * tot[b, 1] / N
            dw = list(dw)
            for c in range(Kh):
                s = h * slots + (i * Kh + c) % slots
                x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                dw[c] = dw[c] + dy_c * x_c * rstd
                dys[s] = (rstd * dy_c * w_smem[h * Kh + c].astype(jnp.float32) - x_c * k).astype(dys.dtype)
            plgpu.commit_smem()
            for c in range(Kh):
                plgpu.copy_smem_to_gmem(dys.at[h * slots + (i * Kh + c) % slots], dx_gmem.at[row, first + c])
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)
            for c in range(Kh):
                fetch(i * Kh + c + slots)
            return tuple(dw)
        dw = jax.lax.fori_loop(0, n_mine, step, tuple(jnp.zeros((T, LANES), jnp.float32) for _ in range(Kh)))
        stage = red.at[h % 2, h // 2]
        for c in range(Kh):
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)
            stage[...] = dw[c]
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(stage, dw_gmem.at[g, first + c])
        plgpu.wait_smem_to_gmem(0)

    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((groups, K, T, LANES), jnp.float32),
                jax.ShapeDtypeStruct((M, 2, 2, LANES), jnp.float32))
    dx, dw_partial, _ = plgpu.kernel(
        body, out_type=out_type, grid=(programs,), grid_names=("p",), num_threads=wgs, thread_name="wg",
        scratch_types=[plgpu.SMEM((Kq, T, LANES), w.dtype),
                       plgpu.SMEM((wgs * slots, T, LANES), x.dtype), plgpu.SMEM((wgs * slots, T, LANES), dy.dtype),
                       plgpu.Barrier(num_barriers=wgs), plgpu.Barrier(num_barriers=wgs * slots), plgpu.Barrier(num_barriers=wgs * slots),
                       plgpu.SMEM((2, max(wgs - 1, 1), T, LANES), jnp.float32), plgpu.SMEM((2, 2), jnp.float32),
                       plgpu.Barrier(num_arrivals=wgs), plgpu.Barrier(),
                       plgpu.SMEM((2, LANES), jnp.float32), plgpu.SMEM((2, 2, LANES), jnp.float32), plgpu.Barrier()],
        interpret=_interpret(interpret))(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "rows", "interpret"))
def bwd_xr(x, w, dy, *, eps, programs, wgs, chunk, rows, interpret=False):
    """bwd_xch with one exchange every `rows` rows: a program pair loads `rows` rows' halves, sums them, swaps
    2 * rows sums in one round trip, then writes their dx. No prefetch (slots = rows * Kh). Rows past M are
    clamped to M - 1 (loaded and summed, not stored, not added to dw). GPU only (global semaphores)."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kq = K // 2
    Kh = Kq // wgs
    R = rows
    slots = R * Kh
    groups = programs // 2
    steps = pl.cdiv(pl.cdiv(M, groups), R)
    assert N % (2 * wgs * chunk) == 0 and programs % 2 == 0 and wgs >= 2 and wgs * slots <= 32
    x4, dy4, w3 = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES)

    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, sums_gmem, w_smem, xs, dys, w_bar, x_bars, dy_bars,
             red, tot, part_bar, done_bar, mine, both, sums_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
        g, q = p // 2, p % 2
        first = q * Kq + h * Kh
        sems = pl.get_global(plgpu.SemaphoreType.REGULAR((programs,)))
        n_mine = (M - g + groups - 1) // groups
        def fetch(i):  # step i's rows
            for r in range(R):
                row = jnp.minimum(g + (i * R + r) * groups, M - 1)
                for c in range(Kh):
                    s = h * slots + r * Kh + c
                    plgpu.copy_gmem_to_smem(x_gmem.at[row, first + c], xs.at[s], x_bars.at[s])
                    plgpu.copy_gmem_to_smem(dy_gmem.at[row, first + c], dys.at[s], dy_bars.at[s])
        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(first, Kh)], w_smem.at[pl.ds(h * Kh, Kh)], w_bar.at[h])
        fetch(0)
        plgpu.barrier_wait(w_bar.at[h])
        def step(i, dw):
            part = []
            for r in range(R):
                sq, gx = 0.0, 0.0
                for c in range(Kh):
                    s = h * slots + r * Kh + c
                    plgpu.barrier_wait(x_bars.at[s])
                    plgpu.barrier_wait(dy_bars.at[s])
                    x_c = xs[s].astype(jnp.float32)
                    sq = sq + x_c * x_c
                    gx = gx + dys[s].astype(jnp.float32) * w_smem[h * Kh + c].astype(jnp.float32) * x_c
                part += [sq, gx]
            @pl.when(h > 0)
            def _():
                for j, v in enumerate(part):
                    red[j, h - 1] = v
            plgpu.barrier_arrive(part_bar)
            plgpu.barrier_wait(part_bar)
            @pl.when(h == 0)
            def _():
                for j, v in enumerate(part):
                    mine[j] = jnp.full((LANES,), jnp.sum(sum((red[j, o] for o in range(wgs - 1)), v)), jnp.float32)
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(mine, sums_gmem.at[g, i, q])
                plgpu.wait_smem_to_gmem(0)  # written, then the partner is told
                pl.semaphore_signal(sems.at[g * 2 + 1 - q], 1)
                pl.semaphore_wait(sems.at[p], 1)
                plgpu.copy_gmem_to_smem(sums_gmem.at[g, i], both, sums_bar)
                plgpu.barrier_wait(sums_bar)
                for j in range(2 * R):
                    tot[j] = (jnp.sum(both[0, j]) + jnp.sum(both[1, j])) / LANES
                plgpu.barrier_arrive(done_bar)
            @pl.when(h > 0)
            def _():
                plgpu.barrier_wait(done_bar)
            dw = list(dw)
            for r in range(R):
                row = g + (i * R + r) * groups
                valid = (row < M).astype(jnp.float32)
                rstd = jax.lax.rsqrt(tot[2 * r] / N + eps)
                k = rstd * rstd * rstd * tot[2 * r + 1] / N
                for c in range(Kh):
                    s = h * slots + r * Kh + c
                    x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                    dw[c] = dw[c] + dy_c * x_c * (rstd * valid)
                    dys[s] = (rstd * dy_c * w_smem[h * Kh + c].astype(jnp.float32) - x_c * k).astype(dys.dtype)
            plgpu.commit_smem()
            for r in range(R):
                row = g + (i * R + r) * groups
                @pl.when(row < M)
                def _():
                    for c in range(Kh):
                        plgpu.copy_smem_to_gmem(dys.at[h * slots + r * Kh + c], dx_gmem.at[row, first + c])
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)
            @pl.when(i + 1 < steps_mine)
            def _():
                fetch(i + 1)
            return tuple(dw)
        steps_mine = (n_mine + R - 1) // R
        dw = jax.lax.fori_loop(0, steps_mine, step, tuple(jnp.zeros((T, LANES), jnp.float32) for _ in range(Kh)))
        stage = red.at[h % 2, h // 2]
        for c in range(Kh):
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)
            stage[...] = dw[c]
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(stage, dw_gmem.at[g, first + c])
        plgpu.wait_smem_to_gmem(0)

    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((groups, K, T, LANES), jnp.float32),
                jax.ShapeDtypeStruct((groups, steps, 2, 2 * R, LANES), jnp.float32))
    dx, dw_partial, _ = plgpu.kernel(
        body, out_type=out_type, grid=(programs,), grid_names=("p",), num_threads=wgs, thread_name="wg",
        scratch_types=[plgpu.SMEM((Kq, T, LANES), w.dtype),
                       plgpu.SMEM((wgs * slots, T, LANES), x.dtype), plgpu.SMEM((wgs * slots, T, LANES), dy.dtype),
                       plgpu.Barrier(num_barriers=wgs), plgpu.Barrier(num_barriers=wgs * slots), plgpu.Barrier(num_barriers=wgs * slots),
                       plgpu.SMEM((2 * R, max(wgs - 1, 1), T, LANES), jnp.float32), plgpu.SMEM((2 * R,), jnp.float32),
                       plgpu.Barrier(num_arrivals=wgs), plgpu.Barrier(),
                       plgpu.SMEM((2 * R, LANES), jnp.float32), plgpu.SMEM((2, 2 * R, LANES), jnp.float32), plgpu.Barrier()],
        interpret=_interpret(interpret))(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

def rel(a, r):
    return np.linalg.norm(np.asarray(a, np.float64) - r) / np.linalg.norm(r)

def float64_vjp(x, w, dy, eps=1e-6):
    x, w, dy = (np.asarray(a, np.float64) for a in (x, w, dy))
    r = 1 / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
    g = dy * w
    return x * r * w, r * g - x * r**3 * np.mean(g * x, -1, keepdims=True), np.sum(dy * x * r, 0)

def data(dt, M, N):
    x, dy = (jax.random.normal(jax.random.key(k), (M, N), jnp.float32).astype(dt) for k in (0, 1))
    w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (N,))).astype(dt)
    return x, w, dy

def bench_ms(fn, *args, calls=10, repeats=7):
    def run():
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
    run()
    return 1e3 * statistics.median(timeit.repeat(run, number=1, repeat=repeats)) / calls

KERNELS = {"fwd_reg": (fwd_reg, False), "fwd_b": (fwd_b, False), "fwd_wgn": (fwd_wgn, False), "bwd_wgr2": (bwd_wgr2, True), "bwd_rrr": (bwd_rrr, True), "bwd_prt": (bwd_prt, True), "fwd_pipe": (fwd_pipe, False), "bwd_xch": (bwd_xch, True), "bwd_xch2": (bwd_xch2, True), "bwd_xr": (bwd_xr, True)}

def trial(name, kw, x, w, dy, light, small):
    fn0, is_bwd = KERNELS[name]
    kw = dict(kw); progs = kw.pop('programs', NUM_SMS if ON_GPU else (4 if name == 'bwd_prt' else 3))
    fn = jax.jit(functools.partial(fn0, eps=1e-6, programs=progs, interpret=INTERP, **kw))
    kw['programs'] = progs
    label = name + " " + " ".join(f"{k}{v}" for k, v in kw.items())
    try:
        xs, ws, dys = small
        ref = float64_vjp(xs, ws, dys)
        if is_bwd:
            dx, dw = fn(xs, ws, dys)
            err = f"dx {rel(dx, ref[1]):.1e} dw {rel(dw, ref[2]):.1e}"
            dx2, dw2 = fn(xs, ws, dys)
            err += " same" if bool((dx == dx2).all() and (dw == dw2).all()) else " DIFFERS"
            ms = bench_ms(fn, x, w, dy) if ON_GPU else 1
            gbs = 3 * x.nbytes / ms * 1e-6
        else:
            y = fn(xs, ws)
            err = f"y {rel(y, ref[0]):.1e}"
            ms = bench_ms(fn, x, w) if ON_GPU else 1
            gbs = 2 * x.nbytes / ms * 1e-6
        print(f"  {label:52s} {gbs:7.0f} GB/s {100 * gbs / light:6.1f}%  {err}", flush=True)
    except Exception as e:
        print(f"  {label:52s} FAIL {type(e).__name__}: {' '.join(str(e).split())[:300]}", flush=True)

def lower(name, kw, dt, N):
    fn0, is_bwd = KERNELS[name]
    x = jax.ShapeDtypeStruct((1024, N), dt); w = jax.ShapeDtypeStruct((N,), dt)
    f = jax.jit(functools.partial(fn0, eps=1e-6, programs=132, **kw))
    try:
        (f.trace(x, w, x) if is_bwd else f.trace(x, w)).lower(lowering_platforms=("cuda",))
        print("lowered", name, jnp.dtype(dt).name, N, kw, flush=True)
    except Exception as e:
        print("lower FAIL", name, jnp.dtype(dt).name, N, kw, type(e).__name__, " ".join(str(e).split())[:300], flush=True)

F = lambda c, s, o: ("fwd_reg", dict(wgs=4, chunk=c, slots=s, outs=o))
B = lambda c, s, o, **kw: ("fwd_b", dict(wgs=4, chunk=c, slots=s, outs=o, **kw))
PLANS = {  # the forward with the row's refills after one commit_smem (xb); the page: fwd_reg
    ("bfloat16", 16384): [F(1024, 4, 2), B(1024, 4, 2, yb=False), B(1024, 4, 2, yb=False, wreg=True)],
    ("float32", 16384): [F(1024, 4, 2), B(1024, 4, 2, yb=False)],
    ("bfloat16", 32768): [F(1024, 4, 2), B(1024, 4, 2, yb=False)],
    ("float32", 32768): [F(512, 4, 2), B(512, 4, 2, yb=False)],
}

if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "cpu":  # the kernels in Mosaic GPU's interpreter with race detection, small rows
        for dt in (jnp.float32, jnp.bfloat16):
            for M, N, kws in [(5, 2048, [("fwd_reg", dict(wgs=2, chunk=512, slots=2, outs=2)), ("fwd_reg", dict(wgs=2, chunk=256, slots=3, outs=1)),
                                         ("fwd_wgn", dict(wgs=2, chunk=512, slots=2, lag=0)),
                                         ("bwd_wgr2", dict(wgs=2, chunk=512, slots=2, lag=0)), ("bwd_wgr2", dict(wgs=2, chunk=256, slots=8, lag=1)),
                                         ("bwd_prt", dict(wgs=2, parts=2, chunk=256, slots=3)), ("bwd_prt", dict(wgs=2, parts=2, chunk=512, slots=2)),
                                         ("fwd_b", dict(wgs=2, chunk=512, slots=2, outs=2)), ("fwd_b", dict(wgs=2, chunk=256, slots=4, outs=4, wreg=True)),
                                         ("fwd_b", dict(wgs=2, chunk=512, slots=2, outs=1, yb=False))])]:
                x, w, dy = data(dt, M, N)
                for name, kw in kws:
                    trial(name, kw, x, w, dy, 1, (x, w, dy))
    elif mode == "low":  # lower every plan for sm_90
        for (name, N), plans in PLANS.items():
            if len(sys.argv) > 2 and f"{name}:{N}" not in sys.argv[2:]:
                continue
            for kn, kw in plans:
                lower(kn, kw, jnp.dtype(name), N)
    elif mode == "gpu":  # gpu DTYPE N
        name, N = sys.argv[2], int(sys.argv[3])
        dt = jnp.dtype(name)
        M = 2**27 // N
        x, w, dy = data(dt, M, N)
        small = data(dt, 2 * NUM_SMS + 7, N)
        lights = [2 * x.nbytes / bench_ms(jax.jit(jnp.copy), x) * 1e-6 for _ in range(3)]
        light = statistics.median(lights)
        print(f"{jax.devices()[0].device_kind} {name} N={N} M={M}: copy {' '.join(f'{l:.0f}' for l in lights)} GB/s", flush=True)
        for j, (kn, kw) in enumerate(PLANS[(name, N)]):
            if len(sys.argv) > 4 and str(j) not in sys.argv[4:]:
                continue
            trial(kn, kw, x, w, dy, light, small)
