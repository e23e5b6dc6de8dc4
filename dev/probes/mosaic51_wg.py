# Probe (session 31, issue 33): deep dive 51 variants -- several warpgroups a program, a row read twice, parts of a row without an exchange; run beside the page (PAGE=...) on an H100: python3 mosaic51_wg.py g8 bfloat16 16384; on a CPU (Python 3.12, JAX 0.11.2): python3 mosaic51_wg.py t6
import functools, os, sys, statistics, timeit
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
src = open(os.environ.get("PAGE", os.path.join(os.path.dirname(os.path.abspath(__file__)), "51_rms_norm_mosaic_gpu.py"))).read()
exec(compile(src.split("# Tutorial 05's kernels, carried")[0].rsplit("# %%", 1)[0], "page51", "exec"))

@functools.partial(jax.jit, static_argnames=("eps", "programs", "chunk", "slots", "lag", "interpret", "dw_on"))
def bwd_wg(x, w, dy, *, eps, programs, chunk, slots, lag, interpret=False, dw_on=True):
    """Two warpgroups a program: warpgroup h takes chunks [h*Kh, (h+1)*Kh) of each row with its own ring of `slots`."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // 2
    assert N % chunk == 0 and K % 2 == 0 and slots >= (lag + 1) * Kh
    x4, dy4, w3, steps = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES), pl.cdiv(M, programs)

    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, w_smem, dw_smem, xs, dys, w_bar, x_bars, dy_bars, part, part_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
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
        for c in range(Kh):
            dw_smem[h * Kh + c] = jnp.zeros((T, LANES), jnp.float32)
        plgpu.barrier_wait(w_bar.at[h])

        def step(i, carry):
            row = p + i * programs
            @pl.when(row < M)
            def _():
                sq, gx = 0.0, 0.0
                for c in range(Kh):
                    s = h * slots + (i * Kh + c) % slots
                    plgpu.barrier_wait(x_bars.at[s])
                    plgpu.barrier_wait(dy_bars.at[s])
                    x_c = xs[s].astype(jnp.float32)
                    sq = sq + x_c * x_c
                    gx = gx + dys[s].astype(jnp.float32) * w_smem[h * Kh + c].astype(jnp.float32) * x_c
                b = i % 2  # double-buffered: a warpgroup a row ahead writes the other buffer
                part[b, h, 0] = jnp.full((LANES,), jnp.sum(sq), jnp.float32)
                part[b, h, 1] = jnp.full((LANES,), jnp.sum(gx), jnp.float32)
                plgpu.commit_smem()  # every thread's part written before the warpgroup arrives
                plgpu.barrier_arrive(part_bar)
                plgpu.barrier_wait(part_bar)
                sum_sq = jnp.sum(part[b, 0, 0] + part[b, 1, 0]) / LANES
                sum_gx = jnp.sum(part[b, 0, 1] + part[b, 1, 1]) / LANES
                rstd = jax.lax.rsqrt(sum_sq / N + eps)
                k = rstd * rstd * rstd * sum_gx / N
                for c in range(Kh):
                    s = h * slots + (i * Kh + c) % slots
                    x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                    if dw_on:
                        dw_smem[h * Kh + c] = dw_smem[h * Kh + c] + dy_c * x_c * rstd
                    dys[s] = (rstd * dy_c * w_smem[h * Kh + c].astype(jnp.float32) - x_c * k).astype(dys.dtype)
                plgpu.commit_smem()
                for c in range(Kh):
                    plgpu.copy_smem_to_gmem(dys.at[h * slots + (i * Kh + c) % slots], dx_gmem.at[row, h * Kh + c])
                plgpu.wait_smem_to_gmem(Kh * lag, wait_read_only=True)
                @pl.when(i >= lag)
                def _():
                    for c in range(Kh):
                        fetch((i - lag) * Kh + c + slots)
            return carry

        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(dw_smem.at[pl.ds(h * Kh, Kh)], dw_gmem.at[p, pl.ds(h * Kh, Kh)])
        plgpu.wait_smem_to_gmem(0)

    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((programs, K, T, LANES), jnp.float32))
    dx, dw_partial = plgpu.kernel(
        body, out_type=out_type, grid=(programs,), grid_names=("p",), num_threads=2, thread_name="wg",
        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((K, T, LANES), jnp.float32),
                       plgpu.SMEM((2 * slots, T, LANES), x.dtype), plgpu.SMEM((2 * slots, T, LANES), dy.dtype),
                       plgpu.Barrier(num_barriers=2), plgpu.Barrier(num_barriers=2 * slots), plgpu.Barrier(num_barriers=2 * slots),
                       plgpu.SMEM((2, 2, 2, LANES), jnp.float32), plgpu.Barrier(num_arrivals=2)],
        interpret=_interpret(interpret))(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "chunk", "slots", "lag", "interpret"))
def fwd_wg(x, w, *, eps, programs, chunk, slots, lag, interpret=False):
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // 2
    assert N % chunk == 0 and K % 2 == 0 and slots >= (lag + 1) * Kh
    x4, w3, steps = x.reshape(M, K, T, LANES), w.reshape(K, T, LANES), pl.cdiv(M, programs)

    def body(x_gmem, w_gmem, y_gmem, w_smem, ring, w_bar, bars, part, part_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
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
            @pl.when(row < M)
            def _():
                sq = 0.0
                for c in range(Kh):
                    s = h * slots + (i * Kh + c) % slots
                    plgpu.barrier_wait(bars.at[s])
                    x_c = ring[s].astype(jnp.float32)
                    sq = sq + x_c * x_c
                b = i % 2
                part[b, h] = jnp.full((LANES,), jnp.sum(sq), jnp.float32)
                plgpu.commit_smem()  # every thread's part written before the warpgroup arrives
                plgpu.barrier_arrive(part_bar)
                plgpu.barrier_wait(part_bar)
                rstd = jax.lax.rsqrt(jnp.sum(part[b, 0] + part[b, 1]) / LANES / N + eps)
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
        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.wait_smem_to_gmem(0)

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x4.shape, x.dtype), grid=(programs,), grid_names=("p",),
                        num_threads=2, thread_name="wg",
                        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((2 * slots, T, LANES), x.dtype),
                                       plgpu.Barrier(num_barriers=2), plgpu.Barrier(num_barriers=2 * slots),
                                       plgpu.SMEM((2, 2, LANES), jnp.float32), plgpu.Barrier(num_arrivals=2)],
                        interpret=_interpret(interpret))(x4, w3).reshape(M, N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "chunk", "slots", "interpret", "stream_w"))
def bwd_rr(x, w, dy, *, eps, programs, chunk, slots, interpret=False, stream_w=False):
    """Each row read twice: pass 1 sums (a slot refilled once read), pass 2 dx and dw (refilled once its store read
    it); dw in SMEM; w in SMEM, or streamed through a third ring (stream_w)."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    assert N % chunk == 0 and slots >= 2
    x4, dy4, w3, steps = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES), pl.cdiv(M, programs)

    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, dw_smem, xs, dys, x_bars, dy_bars, *wscr):
        p = jax.lax.axis_index("p")
        def fetch(g):
            row = p + (g // (2 * K)) * programs
            @pl.when(row < M)
            def _():
                s = g % slots
                plgpu.copy_gmem_to_smem(x_gmem.at[row, g % K], xs.at[s], x_bars.at[s])
                plgpu.copy_gmem_to_smem(dy_gmem.at[row, g % K], dys.at[s], dy_bars.at[s])
                if stream_w:
                    plgpu.copy_gmem_to_smem(w_gmem.at[g % K], wscr[0].at[s], wscr[1].at[s])
        if not stream_w:
            w_smem, w_bar = wscr
            plgpu.copy_gmem_to_smem(w_gmem, w_smem, w_bar)
        for g in range(slots):
            fetch(g)
        for c in range(K):
            dw_smem[c] = jnp.zeros((T, LANES), jnp.float32)
        if not stream_w:
            plgpu.barrier_wait(w_bar)
        def weight(c, s):
            if stream_w:
                plgpu.barrier_wait(wscr[1].at[s])
                return wscr[0][s].astype(jnp.float32)
            return w_smem[c].astype(jnp.float32)

        def step(i, carry):
            row, base = p + i * programs, i * 2 * K
            @pl.when(row < M)
            def _():
                sq, gx = 0.0, 0.0
                for c in range(K):
                    s = (base + c) % slots
                    plgpu.barrier_wait(x_bars.at[s])
                    plgpu.barrier_wait(dy_bars.at[s])
                    x_c = xs[s].astype(jnp.float32)
                    sq = sq + x_c * x_c
                    gx = gx + dys[s].astype(jnp.float32) * weight(c, s) * x_c
                    plgpu.commit_smem()
                    fetch(base + c + slots)
                rstd = jax.lax.rsqrt(jnp.sum(sq) / N + eps)
                k = rstd * rstd * rstd * jnp.sum(gx) / N
                for c in range(K):
                    s = (base + K + c) % slots
                    plgpu.barrier_wait(x_bars.at[s])
                    plgpu.barrier_wait(dy_bars.at[s])
                    x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                    dw_smem[c] = dw_smem[c] + dy_c * x_c * rstd
                    dys[s] = (rstd * dy_c * weight(c, s) - x_c * k).astype(dys.dtype)
                    plgpu.commit_smem()
                    plgpu.copy_smem_to_gmem(dys.at[s], dx_gmem.at[row, c])
                    if c > 0:
                        plgpu.wait_smem_to_gmem(1, wait_read_only=True)  # the previous store has read its slot
                        fetch(base + K + c - 1 + slots)
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)
                fetch(base + 2 * K - 1 + slots)
            return carry
        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(dw_smem, dw_gmem.at[p])
        plgpu.wait_smem_to_gmem(0)

    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((programs, K, T, LANES), jnp.float32))
    wscratch = ([plgpu.SMEM((slots, T, LANES), w.dtype), plgpu.Barrier(num_barriers=slots)] if stream_w else
                [plgpu.SMEM((K, T, LANES), w.dtype), plgpu.Barrier()])
    dx, dw_partial = plgpu.kernel(
        body, out_type=out_type, grid=(programs,), grid_names=("p",),
        scratch_types=[plgpu.SMEM((K, T, LANES), jnp.float32), plgpu.SMEM((slots, T, LANES), x.dtype),
                       plgpu.SMEM((slots, T, LANES), dy.dtype), plgpu.Barrier(num_barriers=slots),
                       plgpu.Barrier(num_barriers=slots)] + wscratch,
        interpret=_interpret(interpret))(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "parts", "chunk", "slots", "interpret", "stream_w"))
def bwd_parts(x, w, dy, *, eps, programs, parts, chunk, slots, interpret=False, stream_w=False):
    """`parts` programs a row, no exchange: each reads the whole row for the two sums (pass 1), then its own columns
    again for dx and dw (pass 2); dw of its columns in SMEM; w whole in SMEM or streamed."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kq, groups = K // parts, programs // parts
    L = K + Kq  # loads a row
    assert N % chunk == 0 and K % parts == 0 and slots >= 2 and programs % parts == 0
    x4, dy4, w3, steps = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES), pl.cdiv(M, groups)

    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, dw_smem, xs, dys, x_bars, dy_bars, *wscr):
        pid = jax.lax.axis_index("p")
        grp, q = pid // parts, pid % parts
        def col(j):  # load j of a row: chunk j (pass 1), then the part's chunks
            return jnp.where(j < K, j, q * Kq + j - K)
        def fetch(g):
            row = grp + (g // L) * groups
            @pl.when(row < M)
            def _():
                s, c = g % slots, col(g % L)
                plgpu.copy_gmem_to_smem(x_gmem.at[row, c], xs.at[s], x_bars.at[s])
                plgpu.copy_gmem_to_smem(dy_gmem.at[row, c], dys.at[s], dy_bars.at[s])
                if stream_w:
                    plgpu.copy_gmem_to_smem(w_gmem.at[c], wscr[0].at[s], wscr[1].at[s])
        if not stream_w:
            w_smem, w_bar = wscr
            plgpu.copy_gmem_to_smem(w_gmem, w_smem, w_bar)
        for g in range(slots):
            fetch(g)
        for c in range(Kq):
            dw_smem[c] = jnp.zeros((T, LANES), jnp.float32)
        if not stream_w:
            plgpu.barrier_wait(w_bar)
        def weight(c, s):
            if stream_w:
                plgpu.barrier_wait(wscr[1].at[s])
                return wscr[0][s].astype(jnp.float32)
            return w_smem[c].astype(jnp.float32)

        def step(i, carry):
            row, base = grp + i * groups, i * L
            @pl.when(row < M)
            def _():
                sq, gx = 0.0, 0.0
                for c in range(K):
                    s = (base + c) % slots
                    plgpu.barrier_wait(x_bars.at[s])
                    plgpu.barrier_wait(dy_bars.at[s])
                    x_c = xs[s].astype(jnp.float32)
                    sq = sq + x_c * x_c
                    gx = gx + dys[s].astype(jnp.float32) * weight(c, s) * x_c
                    plgpu.commit_smem()
                    fetch(base + c + slots)
                rstd = jax.lax.rsqrt(jnp.sum(sq) / N + eps)
                k = rstd * rstd * rstd * jnp.sum(gx) / N
                for c in range(Kq):
                    s = (base + K + c) % slots
                    plgpu.barrier_wait(x_bars.at[s])
                    plgpu.barrier_wait(dy_bars.at[s])
                    x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                    dw_smem[c] = dw_smem[c] + dy_c * x_c * rstd
                    dys[s] = (rstd * dy_c * weight(q * Kq + c, s) - x_c * k).astype(dys.dtype)
                    plgpu.commit_smem()
                    plgpu.copy_smem_to_gmem(dys.at[s], dx_gmem.at[row, q * Kq + c])
                    if c > 0:
                        plgpu.wait_smem_to_gmem(1, wait_read_only=True)
                        fetch(base + K + c - 1 + slots)
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)
                fetch(base + L - 1 + slots)
            return carry
        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(dw_smem, dw_gmem.at[grp, pl.ds(q * Kq, Kq)])
        plgpu.wait_smem_to_gmem(0)

    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((groups, K, T, LANES), jnp.float32))
    wscratch = ([plgpu.SMEM((slots, T, LANES), w.dtype), plgpu.Barrier(num_barriers=slots)] if stream_w else
                [plgpu.SMEM((K, T, LANES), w.dtype), plgpu.Barrier()])
    dx, dw_partial = plgpu.kernel(
        body, out_type=out_type, grid=(programs,), grid_names=("p",),
        scratch_types=[plgpu.SMEM((Kq, T, LANES), jnp.float32), plgpu.SMEM((slots, T, LANES), x.dtype),
                       plgpu.SMEM((slots, T, LANES), dy.dtype), plgpu.Barrier(num_barriers=slots),
                       plgpu.Barrier(num_barriers=slots)] + wscratch,
        interpret=_interpret(interpret))(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "chunk", "slots", "lag", "interpret"))
def fwd_wg2(x, w, *, eps, programs, chunk, slots, lag, interpret=False):
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // 2
    assert N % chunk == 0 and K % 2 == 0 and slots >= (lag + 1) * Kh
    x4, w3, steps = x.reshape(M, K, T, LANES), w.reshape(K, T, LANES), pl.cdiv(M, programs)

    def body(x_gmem, w_gmem, y_gmem, w_smem, ring, w_bar, bars, red, tot, part_bar, done_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
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
            @pl.when(row < M)
            def _():
                sq = 0.0
                for c in range(Kh):
                    s = h * slots + (i * Kh + c) % slots
                    plgpu.barrier_wait(bars.at[s])
                    x_c = ring[s].astype(jnp.float32)
                    sq = sq + x_c * x_c
                b = i % 2  # warpgroup 1 hands its squares to warpgroup 0, which alone reduces (one reduction
                # scratch a kernel): no two reductions at once
                @pl.when(h == 1)
                def _():
                    red[b] = sq
                plgpu.barrier_arrive(part_bar)
                plgpu.barrier_wait(part_bar)
                @pl.when(h == 0)
                def _():
                    tot[b] = jnp.sum(sq + red[b])
                    plgpu.barrier_arrive(done_bar)
                @pl.when(h == 1)
                def _():
                    plgpu.barrier_wait(done_bar)
                rstd = jax.lax.rsqrt(tot[b] / N + eps)
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
        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.wait_smem_to_gmem(0)

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x4.shape, x.dtype), grid=(programs,), grid_names=("p",),
                        num_threads=2, thread_name="wg",
                        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((2 * slots, T, LANES), x.dtype),
                                       plgpu.Barrier(num_barriers=2), plgpu.Barrier(num_barriers=2 * slots),
                                       plgpu.SMEM((2, T, LANES), jnp.float32), plgpu.SMEM((2,), jnp.float32), plgpu.Barrier(num_arrivals=2), plgpu.Barrier()],
                        interpret=_interpret(interpret))(x4, w3).reshape(M, N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "chunk", "slots", "lag", "interpret", "dw_on"))
def bwd_wg2(x, w, dy, *, eps, programs, chunk, slots, lag, interpret=False, dw_on=True):
    """Two warpgroups a program: warpgroup h takes chunks [h*Kh, (h+1)*Kh) of each row with its own ring of `slots`."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // 2
    assert N % chunk == 0 and K % 2 == 0 and slots >= (lag + 1) * Kh
    x4, dy4, w3, steps = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES), pl.cdiv(M, programs)

    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, w_smem, dw_smem, xs, dys, w_bar, x_bars, dy_bars, red, tot, part_bar, done_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
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
        for c in range(Kh):
            dw_smem[h * Kh + c] = jnp.zeros((T, LANES), jnp.float32)
        plgpu.barrier_wait(w_bar.at[h])

        def step(i, carry):
            row = p + i * programs
            @pl.when(row < M)
            def _():
                sq, gx = 0.0, 0.0
                for c in range(Kh):
                    s = h * slots + (i * Kh + c) % slots
                    plgpu.barrier_wait(x_bars.at[s])
                    plgpu.barrier_wait(dy_bars.at[s])
                    x_c = xs[s].astype(jnp.float32)
                    sq = sq + x_c * x_c
                    gx = gx + dys[s].astype(jnp.float32) * w_smem[h * Kh + c].astype(jnp.float32) * x_c
                b = i % 2
                @pl.when(h == 1)
                def _():
                    red[b, 0] = sq
                    red[b, 1] = gx
                plgpu.barrier_arrive(part_bar)
                plgpu.barrier_wait(part_bar)
                @pl.when(h == 0)
                def _():
                    tot[b, 0] = jnp.sum(sq + red[b, 0])
                    tot[b, 1] = jnp.sum(gx + red[b, 1])
                    plgpu.barrier_arrive(done_bar)
                @pl.when(h == 1)
                def _():
                    plgpu.barrier_wait(done_bar)
                sum_sq, sum_gx = tot[b, 0], tot[b, 1]
                rstd = jax.lax.rsqrt(sum_sq / N + eps)
                k = rstd * rstd * rstd * sum_gx / N
                for c in range(Kh):
                    s = h * slots + (i * Kh + c) % slots
                    x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                    if dw_on:
                        dw_smem[h * Kh + c] = dw_smem[h * Kh + c] + dy_c * x_c * rstd
                    dys[s] = (rstd * dy_c * w_smem[h * Kh + c].astype(jnp.float32) - x_c * k).astype(dys.dtype)
                plgpu.commit_smem()
                for c in range(Kh):
                    plgpu.copy_smem_to_gmem(dys.at[h * slots + (i * Kh + c) % slots], dx_gmem.at[row, h * Kh + c])
                plgpu.wait_smem_to_gmem(Kh * lag, wait_read_only=True)
                @pl.when(i >= lag)
                def _():
                    for c in range(Kh):
                        fetch((i - lag) * Kh + c + slots)
            return carry

        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(dw_smem.at[pl.ds(h * Kh, Kh)], dw_gmem.at[p, pl.ds(h * Kh, Kh)])
        plgpu.wait_smem_to_gmem(0)

    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((programs, K, T, LANES), jnp.float32))
    dx, dw_partial = plgpu.kernel(
        body, out_type=out_type, grid=(programs,), grid_names=("p",), num_threads=2, thread_name="wg",
        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((K, T, LANES), jnp.float32),
                       plgpu.SMEM((2 * slots, T, LANES), x.dtype), plgpu.SMEM((2 * slots, T, LANES), dy.dtype),
                       plgpu.Barrier(num_barriers=2), plgpu.Barrier(num_barriers=2 * slots), plgpu.Barrier(num_barriers=2 * slots),
                       plgpu.SMEM((2, 2, T, LANES), jnp.float32), plgpu.SMEM((2, 2), jnp.float32), plgpu.Barrier(num_arrivals=2), plgpu.Barrier()],
        interpret=_interpret(interpret))(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "lag", "interpret"))
def fwd_wgn(x, w, *, eps, programs, wgs, chunk, slots, lag, interpret=False):
    """`wgs` warpgroups a program, warpgroup h takes chunks [h*Kh, (h+1)*Kh) of each row through its own ring of
    `slots`; the others hand their squares to warpgroup 0, which alone reduces."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // wgs
    assert N % chunk == 0 and K % wgs == 0 and slots >= (lag + 1) * Kh
    x4, w3, steps = x.reshape(M, K, T, LANES), w.reshape(K, T, LANES), pl.cdiv(M, programs)

    def body(x_gmem, w_gmem, y_gmem, w_smem, ring, w_bar, bars, red, tot, part_bar, done_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
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
            @pl.when(row < M)
            def _():
                sq = 0.0
                for c in range(Kh):
                    s = h * slots + (i * Kh + c) % slots
                    plgpu.barrier_wait(bars.at[s])
                    x_c = ring[s].astype(jnp.float32)
                    sq = sq + x_c * x_c
                b = i % 2
                @pl.when(h > 0)
                def _():
                    red[b, h - 1] = sq
                plgpu.barrier_arrive(part_bar)
                plgpu.barrier_wait(part_bar)
                @pl.when(h == 0)
                def _():
                    tot[b] = jnp.sum(sum((red[b, o] for o in range(wgs - 1)), sq))
                    plgpu.barrier_arrive(done_bar)
                @pl.when(h > 0)
                def _():
                    plgpu.barrier_wait(done_bar)
                rstd = jax.lax.rsqrt(tot[b] / N + eps)
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
        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.wait_smem_to_gmem(0)

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x4.shape, x.dtype), grid=(programs,), grid_names=("p",),
                        num_threads=wgs, thread_name="wg",
                        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((wgs * slots, T, LANES), x.dtype),
                                       plgpu.Barrier(num_barriers=wgs), plgpu.Barrier(num_barriers=wgs * slots),
                                       plgpu.SMEM((2, wgs - 1, T, LANES), jnp.float32), plgpu.SMEM((2,), jnp.float32),
                                       plgpu.Barrier(num_arrivals=wgs), plgpu.Barrier()],
                        interpret=_interpret(interpret))(x4, w3).reshape(M, N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "lag", "interpret"))
def bwd_wgn(x, w, dy, *, eps, programs, wgs, chunk, slots, lag, interpret=False):
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // wgs
    assert N % chunk == 0 and K % wgs == 0 and slots >= (lag + 1) * Kh
    x4, dy4, w3, steps = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES), pl.cdiv(M, programs)

    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, w_smem, dw_smem, xs, dys, w_bar, x_bars, dy_bars, red, tot, part_bar, done_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
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
        for c in range(Kh):
            dw_smem[h * Kh + c] = jnp.zeros((T, LANES), jnp.float32)
        plgpu.barrier_wait(w_bar.at[h])
        def step(i, carry):
            row = p + i * programs
            @pl.when(row < M)
            def _():
                sq, gx = 0.0, 0.0
                for c in range(Kh):
                    s = h * slots + (i * Kh + c) % slots
                    plgpu.barrier_wait(x_bars.at[s])
                    plgpu.barrier_wait(dy_bars.at[s])
                    x_c = xs[s].astype(jnp.float32)
                    sq = sq + x_c * x_c
                    gx = gx + dys[s].astype(jnp.float32) * w_smem[h * Kh + c].astype(jnp.float32) * x_c
                b = i % 2
                @pl.when(h > 0)
                def _():
                    red[b, 0, h - 1] = sq
                    red[b, 1, h - 1] = gx
                plgpu.barrier_arrive(part_bar)
                plgpu.barrier_wait(part_bar)
                @pl.when(h == 0)
                def _():
                    tot[b, 0] = jnp.sum(sum((red[b, 0, o] for o in range(wgs - 1)), sq))
                    tot[b, 1] = jnp.sum(sum((red[b, 1, o] for o in range(wgs - 1)), gx))
                    plgpu.barrier_arrive(done_bar)
                @pl.when(h > 0)
                def _():
                    plgpu.barrier_wait(done_bar)
                rstd = jax.lax.rsqrt(tot[b, 0] / N + eps)
                k = rstd * rstd * rstd * tot[b, 1] / N
                for c in range(Kh):
                    s = h * slots + (i * Kh + c) % slots
                    x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                    dw_smem[h * Kh + c] = dw_smem[h * Kh + c] + dy_c * x_c * rstd
                    dys[s] = (rstd * dy_c * w_smem[h * Kh + c].astype(jnp.float32) - x_c * k).astype(dys.dtype)
                plgpu.commit_smem()
                for c in range(Kh):
                    plgpu.copy_smem_to_gmem(dys.at[h * slots + (i * Kh + c) % slots], dx_gmem.at[row, h * Kh + c])
                plgpu.wait_smem_to_gmem(Kh * lag, wait_read_only=True)
                @pl.when(i >= lag)
                def _():
                    for c in range(Kh):
                        fetch((i - lag) * Kh + c + slots)
            return carry
        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(dw_smem.at[pl.ds(h * Kh, Kh)], dw_gmem.at[p, pl.ds(h * Kh, Kh)])
        plgpu.wait_smem_to_gmem(0)

    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((programs, K, T, LANES), jnp.float32))
    dx, dw_partial = plgpu.kernel(
        body, out_type=out_type, grid=(programs,), grid_names=("p",), num_threads=wgs, thread_name="wg",
        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((K, T, LANES), jnp.float32),
                       plgpu.SMEM((wgs * slots, T, LANES), x.dtype), plgpu.SMEM((wgs * slots, T, LANES), dy.dtype),
                       plgpu.Barrier(num_barriers=wgs), plgpu.Barrier(num_barriers=wgs * slots), plgpu.Barrier(num_barriers=wgs * slots),
                       plgpu.SMEM((2, 2, wgs - 1, T, LANES), jnp.float32), plgpu.SMEM((2, 2), jnp.float32),
                       plgpu.Barrier(num_arrivals=wgs), plgpu.Barrier()],
        interpret=_interpret(interpret))(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

FOLD = int(os.environ.get("FOLD", "0"))  # 0: hand over whole (T, 256) sums; else fold them to (FOLD, 256) first

def _fold(v):
    while FOLD and v.shape[0] > FOLD:
        n = v.shape[0] // 2
        v = v[:n] + v[n:]
    return v

def _hand_over(h, wgs, b, sums, red, tot, part_bar, done_bar):
    """The row's elementwise sums of every warpgroup added and reduced by warpgroup 0 alone (one reduction scratch a
    kernel); returns the scalars, read from SMEM by every warpgroup."""
    @pl.when(h > 0)
    def _():
        for j, v in enumerate(sums):
            red[b, j, h - 1] = v
    plgpu.barrier_arrive(part_bar)
    plgpu.barrier_wait(part_bar)
    @pl.when(h == 0)
    def _():
        for j, v in enumerate(sums):
            tot[b, j] = jnp.sum(sum((red[b, j, o] for o in range(wgs - 1)), v))
        plgpu.barrier_arrive(done_bar)
    @pl.when(h > 0)
    def _():
        plgpu.barrier_wait(done_bar)
    return [tot[b, j] for j in range(len(sums))]

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "interpret", "stream_w"))
def bwd_rrn(x, w, dy, *, eps, programs, wgs, chunk, slots, interpret=False, stream_w=False):
    """Several warpgroups, each row read twice; warpgroup h takes chunks [h Kh, (h+1) Kh) through its own ring."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // wgs
    assert N % chunk == 0 and K % wgs == 0 and slots >= 2
    x4, dy4, w3, steps = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES), pl.cdiv(M, programs)

    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, dw_smem, xs, dys, x_bars, dy_bars, red, tot, part_bar, done_bar, *wscr):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
        def fetch(k):  # the warpgroup's load k: row p + (k // 2Kh) programs, chunk h Kh + k % Kh
            row = p + (k // (2 * Kh)) * programs
            @pl.when(row < M)
            def _():
                s, c = h * slots + k % slots, h * Kh + k % Kh
                plgpu.copy_gmem_to_smem(x_gmem.at[row, c], xs.at[s], x_bars.at[s])
                plgpu.copy_gmem_to_smem(dy_gmem.at[row, c], dys.at[s], dy_bars.at[s])
                if stream_w:
                    plgpu.copy_gmem_to_smem(w_gmem.at[c], wscr[0].at[s], wscr[1].at[s])
        if not stream_w:
            w_smem, w_bar = wscr
            plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(h * Kh, Kh)], w_smem.at[pl.ds(h * Kh, Kh)], w_bar.at[h])
        for k in range(slots):
            fetch(k)
        for c in range(Kh):
            dw_smem[h * Kh + c] = jnp.zeros((T, LANES), jnp.float32)
        if not stream_w:
            plgpu.barrier_wait(w_bar.at[h])
        def weight(c, s):
            if stream_w:
                plgpu.barrier_wait(wscr[1].at[s])
                return wscr[0][s].astype(jnp.float32)
            return w_smem[h * Kh + c].astype(jnp.float32)

        def step(i, carry):
            row, base = p + i * programs, i * 2 * Kh
            @pl.when(row < M)
            def _():
                sq, gx = 0.0, 0.0
                for c in range(Kh):
                    s = h * slots + (base + c) % slots
                    plgpu.barrier_wait(x_bars.at[s])
                    plgpu.barrier_wait(dy_bars.at[s])
                    x_c = xs[s].astype(jnp.float32)
                    sq = sq + x_c * x_c
                    gx = gx + dys[s].astype(jnp.float32) * weight(c, s) * x_c
                    plgpu.commit_smem()
                    fetch(base + c + slots)
                sum_sq, sum_gx = _hand_over(h, wgs, i % 2, (sq, gx), red, tot, part_bar, done_bar)
                rstd = jax.lax.rsqrt(sum_sq / N + eps)
                k = rstd * rstd * rstd * sum_gx / N
                for c in range(Kh):
                    s = h * slots + (base + Kh + c) % slots
                    plgpu.barrier_wait(x_bars.at[s])
                    plgpu.barrier_wait(dy_bars.at[s])
                    x_c, dy_c = xs[s].astype(jnp.float32), dys[s].astype(jnp.float32)
                    dw_smem[h * Kh + c] = dw_smem[h * Kh + c] + dy_c * x_c * rstd
                    dys[s] = (rstd * dy_c * weight(c, s) - x_c * k).astype(dys.dtype)
                    plgpu.commit_smem()
                    plgpu.copy_smem_to_gmem(dys.at[s], dx_gmem.at[row, h * Kh + c])
                    if c > 0:
                        plgpu.wait_smem_to_gmem(1, wait_read_only=True)
                        fetch(base + Kh + c - 1 + slots)
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)
                fetch(base + 2 * Kh - 1 + slots)
            return carry
        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(dw_smem.at[pl.ds(h * Kh, Kh)], dw_gmem.at[p, pl.ds(h * Kh, Kh)])
        plgpu.wait_smem_to_gmem(0)

    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((programs, K, T, LANES), jnp.float32))
    wscratch = ([plgpu.SMEM((wgs * slots, T, LANES), w.dtype), plgpu.Barrier(num_barriers=wgs * slots)] if stream_w else
                [plgpu.SMEM((K, T, LANES), w.dtype), plgpu.Barrier(num_barriers=wgs)])
    dx, dw_partial = plgpu.kernel(
        body, out_type=out_type, grid=(programs,), grid_names=("p",), num_threads=wgs, thread_name="wg",
        scratch_types=[plgpu.SMEM((K, T, LANES), jnp.float32), plgpu.SMEM((wgs * slots, T, LANES), x.dtype),
                       plgpu.SMEM((wgs * slots, T, LANES), dy.dtype), plgpu.Barrier(num_barriers=wgs * slots),
                       plgpu.Barrier(num_barriers=wgs * slots), plgpu.SMEM((2, 2, max(wgs - 1, 1), T, LANES), jnp.float32),
                       plgpu.SMEM((2, 2), jnp.float32), plgpu.Barrier(num_arrivals=wgs), plgpu.Barrier()] + wscratch,
        interpret=_interpret(interpret))(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "interpret"))
def fwd_rrn(x, w, *, eps, programs, wgs, chunk, slots, interpret=False):
    """Several warpgroups, each row read twice (w and a row do not fit SMEM together)."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // wgs
    assert N % chunk == 0 and K % wgs == 0 and slots >= 2
    x4, w3, steps = x.reshape(M, K, T, LANES), w.reshape(K, T, LANES), pl.cdiv(M, programs)

    def body(x_gmem, w_gmem, y_gmem, w_smem, ring, w_bar, bars, red, tot, part_bar, done_bar):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
        def fetch(k):
            row = p + (k // (2 * Kh)) * programs
            @pl.when(row < M)
            def _():
                s = h * slots + k % slots
                plgpu.copy_gmem_to_smem(x_gmem.at[row, h * Kh + k % Kh], ring.at[s], bars.at[s])
        plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(h * Kh, Kh)], w_smem.at[pl.ds(h * Kh, Kh)], w_bar.at[h])
        for k in range(slots):
            fetch(k)
        plgpu.barrier_wait(w_bar.at[h])
        def step(i, carry):
            row, base = p + i * programs, i * 2 * Kh
            @pl.when(row < M)
            def _():
                sq = 0.0
                for c in range(Kh):
                    s = h * slots + (base + c) % slots
                    plgpu.barrier_wait(bars.at[s])
                    x_c = ring[s].astype(jnp.float32)
                    sq = sq + x_c * x_c
                    plgpu.commit_smem()
                    fetch(base + c + slots)
                (sum_sq,) = _hand_over(h, wgs, i % 2, (sq,), red, tot, part_bar, done_bar)
                rstd = jax.lax.rsqrt(sum_sq / N + eps)
                for c in range(Kh):
                    s = h * slots + (base + Kh + c) % slots
                    plgpu.barrier_wait(bars.at[s])
                    ring[s] = (ring[s].astype(jnp.float32) * rstd * w_smem[h * Kh + c].astype(jnp.float32)).astype(ring.dtype)
                    plgpu.commit_smem()
                    plgpu.copy_smem_to_gmem(ring.at[s], y_gmem.at[row, h * Kh + c])
                    if c > 0:
                        plgpu.wait_smem_to_gmem(1, wait_read_only=True)
                        fetch(base + Kh + c - 1 + slots)
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)
                fetch(base + 2 * Kh - 1 + slots)
            return carry
        jax.lax.fori_loop(0, steps, step, 0)
        plgpu.wait_smem_to_gmem(0)

    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x4.shape, x.dtype), grid=(programs,), grid_names=("p",),
                        num_threads=wgs, thread_name="wg",
                        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((wgs * slots, T, LANES), x.dtype),
                                       plgpu.Barrier(num_barriers=wgs), plgpu.Barrier(num_barriers=wgs * slots),
                                       plgpu.SMEM((2, 1, max(wgs - 1, 1), T, LANES), jnp.float32), plgpu.SMEM((2, 1), jnp.float32),
                                       plgpu.Barrier(num_arrivals=wgs), plgpu.Barrier()],
                        interpret=_interpret(interpret))(x4, w3).reshape(M, N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "lag", "interpret"))
def bwd_wgr(x, w, dy, *, eps, programs, wgs, chunk, slots, lag, interpret=False):
    """bwd_wgn with dw in registers: each thread carries its columns' dw through the loop over rows (Kh chunks of
    chunk / 128 fp32 values); SMEM holds w and the rings only."""
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // wgs
    assert N % chunk == 0 and K % wgs == 0 and slots >= (lag + 1) * Kh
    x4, dy4, w3 = x.reshape(M, K, T, LANES), dy.reshape(M, K, T, LANES), w.reshape(K, T, LANES)

    def body(x_gmem, dy_gmem, w_gmem, dx_gmem, dw_gmem, w_smem, stage, xs, dys, w_bar, x_bars, dy_bars, red, tot, part_bar, done_bar):
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
            sum_sq, sum_gx = _hand_over(h, wgs, 0, (_fold(sq), _fold(gx)), red, tot, part_bar, done_bar)
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
        for c in range(Kh):  # through one staging chunk a warpgroup
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)
            stage[h] = dw[c]
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(stage.at[h], dw_gmem.at[p, h * Kh + c])
        plgpu.wait_smem_to_gmem(0)

    out_type = (jax.ShapeDtypeStruct(x4.shape, dy.dtype), jax.ShapeDtypeStruct((programs, K, T, LANES), jnp.float32))
    dx, dw_partial = plgpu.kernel(
        body, out_type=out_type, grid=(programs,), grid_names=("p",), num_threads=wgs, thread_name="wg",
        scratch_types=[plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((wgs, T, LANES), jnp.float32),
                       plgpu.SMEM((wgs * slots, T, LANES), x.dtype), plgpu.SMEM((wgs * slots, T, LANES), dy.dtype),
                       plgpu.Barrier(num_barriers=wgs), plgpu.Barrier(num_barriers=wgs * slots), plgpu.Barrier(num_barriers=wgs * slots),
                       plgpu.SMEM((1, 2, max(wgs - 1, 1), min(FOLD or T, T), LANES), jnp.float32), plgpu.SMEM((1, 2), jnp.float32),
                       plgpu.Barrier(num_arrivals=wgs), plgpu.Barrier()],
        interpret=_interpret(interpret))(x4, dy4, w3)
    return dx.reshape(M, N), jnp.sum(dw_partial, axis=0).reshape(N)

def rel(a, r):
    return np.linalg.norm(np.asarray(a, np.float64) - r) / np.linalg.norm(r)

def float64_vjp(x, w, dy, eps=1e-6):
    x, w, dy = (np.asarray(a, np.float64) for a in (x, w, dy))
    r = 1 / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
    g = dy * w
    return x * r * w, r * g - x * r**3 * np.mean(g * x, -1, keepdims=True), np.sum(dy * x * r, 0)

def smem_bytes(N, it, chunk, slots, bwd, threads):
    return N * it + (N * 4 if bwd else 0) + threads * slots * chunk * it * (2 if bwd else 1)

if sys.argv[1] == "cpu":
    for M, N, chunk, slots, lag in [(5, 2048, 512, 4, 1), (7, 4096, 1024, 2, 0), (3, 2048, 256, 8, 1)]:
        for dt in (jnp.float32, jnp.bfloat16):
            x, dy = (jax.random.normal(jax.random.key(k), (M, N), jnp.float32).astype(dt) for k in (0, 1))
            w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (N,))).astype(dt)
            yr, dxr, dwr = float64_vjp(x, w, dy)
            y = fwd_wg(x, w, eps=1e-6, programs=3, chunk=chunk, slots=slots, lag=lag, interpret=True)
            dx, dw = bwd_wg(x, w, dy, eps=1e-6, programs=3, chunk=chunk, slots=slots, lag=lag, interpret=True)
            for sw in (False, True):
                dx2, dw2 = bwd_rr(x, w, dy, eps=1e-6, programs=3, chunk=chunk, slots=max(2, slots // 2 + 1), stream_w=sw, interpret=True)
                print("   rr", sw, f"dx {rel(dx2, dxr):.1e} dw {rel(dw2, dwr):.1e}")
            print(M, N, chunk, slots, lag, jnp.dtype(dt).name, f"y {rel(y, yr):.1e} dx {rel(dx, dxr):.1e} dw {rel(dw, dwr):.1e}", flush=True)
    for args in [("bfloat16", 16384, 4096, 2, 0, True), ("bfloat16", 16384, 2048, 8, 1, True)]:
        dt, N, chunk, slots, lag, bwd = args
        x = jax.ShapeDtypeStruct((1024, N), dt); w = jax.ShapeDtypeStruct((N,), dt)
        try:
            if bwd:
                f = functools.partial(bwd_wg, eps=1e-6, programs=132, chunk=chunk, slots=slots, lag=lag)
                jax.jit(f).trace(x, w, x).lower(lowering_platforms=("cuda",))
            else:
                f = functools.partial(fwd_wg, eps=1e-6, programs=132, chunk=chunk, slots=slots, lag=lag)
                jax.jit(f).trace(x, w).lower(lowering_platforms=("cuda",))
            print("lowered", args, smem_bytes(N, jnp.dtype(dt).itemsize, chunk, slots, bwd, 2))
        except Exception as e:
            print("lower FAIL", args, type(e).__name__, " ".join(str(e).split())[:300])

def bench_ms(fn, *args, calls=10 if ON_GPU else 1, repeats=7 if ON_GPU else 1):  # the page's measure: queue `calls` calls, wait for the last, median
    def run():
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
    run()
    return 1e3 * statistics.median(timeit.repeat(run, number=1, repeat=repeats)) / calls

def data(dt, M, N):
    x, dy = (jax.random.normal(jax.random.key(k), (M, N), jnp.float32).astype(dt) for k in (0, 1))
    w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (N,))).astype(dt)
    return x, w, dy

def trial(label, fn, is_bwd, x, w, dy, light, small):
    try:
        xs, ws, dys = small
        ref = float64_vjp(xs, ws, dys)
        if is_bwd:
            dx, dw = fn(xs, ws, dys)
            err = f"dx {rel(dx, ref[1]):.1e} dw {rel(dw, ref[2]):.1e}"
            dx2, dw2 = fn(xs, ws, dys)
            err += " same" if bool((dx == dx2).all() and (dw == dw2).all()) else " DIFFERS"
            ms = bench_ms(lambda x, w, dy: fn(x, w, dy), x, w, dy)
            gbs = 3 * x.nbytes / ms * 1e-6
        else:
            err = f"y {rel(fn(xs, ws), ref[0]):.1e}"
            ms = bench_ms(fn, x, w)
            gbs = 2 * x.nbytes / ms * 1e-6
        print(f"  {label:48s} {gbs:7.0f} GB/s {100 * gbs / light:6.1f}%  {err}", flush=True)
    except Exception as e:
        print(f"  {label:48s} FAIL {type(e).__name__}: {' '.join(str(e).split())[:200]}", flush=True)

TOTAL = 2**27 if ON_GPU else 2**14
INTERP = not ON_GPU
if sys.argv[1] in ("gpu", "gsplit"):
    print(jax.devices()[0].device_kind, jax.__version__, "SMs", NUM_SMS, flush=True)
    eps = 1e-6
    plans = {"gpu": [("bfloat16", 16384), ("bfloat16", 32768), ("bfloat16", 8192), ("float32", 16384), ("float32", 8192)],
             "gsplit": [("bfloat16", 32768), ("float32", 16384), ("float32", 32768), ("bfloat16", 16384)]}[sys.argv[1]] if ON_GPU else [("bfloat16", 4096), ("float32", 2048)]
    for name, N in plans:
        dt, it = jnp.dtype(name), jnp.dtype(name).itemsize
        M = TOTAL // N
        x, w, dy = data(dt, M, N)
        small = data(dt, 2 * NUM_SMS + 7 if ON_GPU else 5, N)
        light = 2 * x.nbytes / bench_ms(jax.jit(jnp.copy), x) * 1e-6
        print(f"{name} N={N} M={M}: copy {light:.0f} GB/s", flush=True)
        fc, bc = _config(M, N, it), _config(M, N, it, backward=True)
        if sys.argv[1] == "gsplit":
            if bc is None:
                print("  backward: no config"); continue
            groups, split, chunk, slots, lag = bc
            for sp in sorted({split, 2, 4}):
                if N % (sp * chunk): continue
                share = N // sp
                for lg, sl in ((lag, slots), (0, share // chunk)):
                    if share * it + share * 4 + sl * chunk * it * 2 + 8192 > 232448: continue
                    f = jax.jit(functools.partial(rms_norm_bwd, eps=eps, groups=NUM_SMS // sp, split=sp, chunk=chunk, slots=sl, lag=lg, interpret=INTERP))
                    trial(f"bwd page split {sp} c{chunk} s{sl} L{lg}", f, True, x, w, dy, light, small)
            continue
        if fc[3] is not None:
            programs, chunk, slots, lag = fc
            trial(f"fwd page c{chunk} s{slots} L{lag}", jax.jit(functools.partial(rms_norm_fwd, eps=eps, programs=programs, chunk=chunk, slots=slots, lag=lag, interpret=INTERP)), False, x, w, dy, light, small)
        K = N // 2048
        for chunk, rows, lag in [(2048, 2, 1), (2048, 3, 1), (2048, 4, 2), (4096, 2, 1), (4096, 3, 1), (1024, 2, 1)]:
            Kh = N // chunk // 2
            slots = rows * Kh
            if N * it + 2 * slots * chunk * it + 4096 > 232448 or Kh < 1: continue
            trial(f"fwd 2wg c{chunk} s{slots} L{lag}", jax.jit(functools.partial(fwd_wg, eps=eps, programs=NUM_SMS, chunk=chunk, slots=slots, lag=lag, interpret=INTERP)), False, x, w, dy, light, small)
        if bc is not None and bc[1] == 1:
            groups, split, chunk, slots, lag = bc
            trial(f"bwd page c{chunk} s{slots} L{lag}", jax.jit(functools.partial(rms_norm_bwd, eps=eps, groups=groups, split=1, chunk=chunk, slots=slots, lag=lag, interpret=INTERP)), True, x, w, dy, light, small)
        for chunk, rows, lag, dw_on in [(4096, 1, 0, True), (2048, 1, 0, True), (4096, 2, 1, True), (2048, 2, 1, True), (1024, 2, 1, True), (4096, 1, 0, False), (2048, 2, 1, False)]:
            Kh = N // chunk // 2
            slots = rows * Kh
            if N * it + N * 4 + 2 * 2 * slots * chunk * it + 4096 > 232448 or Kh < 1: continue
            trial(f"bwd 2wg c{chunk} s{slots} L{lag}" + ("" if dw_on else " NO DW"), jax.jit(functools.partial(bwd_wg, eps=eps, programs=NUM_SMS, chunk=chunk, slots=slots, lag=lag, dw_on=dw_on, interpret=INTERP)), True, x, w, dy, light, small)
        del x, w, dy

if sys.argv[1] == "g2":  # g2 DTYPE N: the page's kernels (one reduction a row) and the variants
    name, N = sys.argv[2], int(sys.argv[3])
    dt, it, eps = jnp.dtype(name), jnp.dtype(name).itemsize, 1e-6
    M = TOTAL // N
    x, w, dy = data(dt, M, N)
    small = data(dt, 2 * NUM_SMS + 7 if ON_GPU else 5, N)
    light = 2 * x.nbytes / bench_ms(jax.jit(jnp.copy), x) * 1e-6
    print(f"{name} N={N} M={M}: copy {light:.0f} GB/s", flush=True)
    P = NUM_SMS
    fc, bc = _config(M, N, it), _config(M, N, it, backward=True)
    if fc[3] is None:
        trial(f"fwd page reread c{fc[1]} s{fc[2]}", jax.jit(functools.partial(rms_norm_fwd_reread, eps=eps, programs=P, chunk=fc[1], slots=fc[2], interpret=INTERP)), False, x, w, dy, light, small)
    else:
        trial(f"fwd page c{fc[1]} s{fc[2]} L{fc[3]}", jax.jit(functools.partial(rms_norm_fwd, eps=eps, programs=P, chunk=fc[1], slots=fc[2], lag=fc[3], interpret=INTERP)), False, x, w, dy, light, small)
    for chunk, rows, lag in [(2048, 3, 1), (2048, 4, 2), (4096, 2, 1), (4096, 3, 1)]:
        Kh = N // chunk // 2
        if Kh < 1 or N * it + 2 * rows * Kh * chunk * it + 8192 > 232448: continue
        trial(f"fwd 2wg c{chunk} s{rows * Kh} L{lag}", jax.jit(functools.partial(fwd_wg, eps=eps, programs=P, chunk=chunk, slots=rows * Kh, lag=lag, interpret=INTERP)), False, x, w, dy, light, small)
    if bc is not None and bc[1] == 1:
        trial(f"bwd page c{bc[2]} s{bc[3]} L{bc[4]}", jax.jit(functools.partial(rms_norm_bwd, eps=eps, groups=P, split=1, chunk=bc[2], slots=bc[3], lag=bc[4], interpret=INTERP)), True, x, w, dy, light, small)
    for chunk, rows, lag in [(4096, 1, 0), (2048, 1, 0), (4096, 2, 1), (2048, 2, 1)]:
        Kh = N // chunk // 2
        if Kh < 1 or N * it + N * 4 + 2 * 2 * rows * Kh * chunk * it + 8192 > 232448: continue
        trial(f"bwd 2wg c{chunk} s{rows * Kh} L{lag}", jax.jit(functools.partial(bwd_wg, eps=eps, programs=P, chunk=chunk, slots=rows * Kh, lag=lag, interpret=INTERP)), True, x, w, dy, light, small)
    for chunk, slots, sw in [(4096, 4, False), (2048, 8, False), (2048, 6, False), (1024, 16, False), (1024, 8, False), (2048, 8, True), (2048, 4, True), (1024, 8, True), (1024, 16, True)]:
        if N % chunk or (0 if sw else N * it) + N * 4 + slots * chunk * it * (3 if sw else 2) + 2048 > 232448: continue
        trial(f"bwd reread c{chunk} s{slots}" + (" w streamed" if sw else ""), jax.jit(functools.partial(bwd_rr, eps=eps, programs=P, chunk=chunk, slots=slots, stream_w=sw, interpret=INTERP)), True, x, w, dy, light, small)

if sys.argv[1] == "g3":  # g3 DTYPE N: A/B of the forward's sums, 2wg fixed, reread backward
    name, N = sys.argv[2], int(sys.argv[3])
    dt, it, eps = jnp.dtype(name), jnp.dtype(name).itemsize, 1e-6
    M = TOTAL // N
    x, w, dy = data(dt, M, N)
    small = data(dt, 2 * NUM_SMS + 7 if ON_GPU else 5, N)
    light = 2 * x.nbytes / bench_ms(jax.jit(jnp.copy), x) * 1e-6
    print(f"{name} N={N} M={M}: copy {light:.0f} GB/s", flush=True)
    P = NUM_SMS
    old = {}
    exec(compile(open(os.environ.get("OLD", os.path.join(os.path.dirname(os.path.abspath(__file__)), "old51.py"))).read().split("# The backward: dw in shared memory")[0].rsplit("# %%", 1)[0], "old51", "exec"), old)
    fc = _config(M, N, it)
    for rep in range(2):
        if fc[3] is None:
            trial(f"fwd page reread c{fc[1]} s{fc[2]}", jax.jit(functools.partial(rms_norm_fwd_reread, eps=eps, programs=P, chunk=fc[1], slots=fc[2], interpret=INTERP)), False, x, w, dy, light, small)
            trial(f"fwd OLD reread c{fc[1]} s{fc[2]}", jax.jit(functools.partial(old["rms_norm_fwd_reread"], eps=eps, programs=P, chunk=fc[1], slots=fc[2], interpret=INTERP)), False, x, w, dy, light, small)
        else:
            trial(f"fwd page c{fc[1]} s{fc[2]} L{fc[3]}", jax.jit(functools.partial(rms_norm_fwd, eps=eps, programs=P, chunk=fc[1], slots=fc[2], lag=fc[3], interpret=INTERP)), False, x, w, dy, light, small)
            trial(f"fwd OLD c{fc[1]} s{fc[2]} L{fc[3]}", jax.jit(functools.partial(old["rms_norm_fwd"], eps=eps, programs=P, chunk=fc[1], slots=fc[2], lag=fc[3], interpret=INTERP)), False, x, w, dy, light, small)
    for chunk, rows, lag in [(2048, 4, 2), (4096, 2, 1), (4096, 3, 1), (4096, 1, 0)]:
        Kh = N // chunk // 2
        if Kh < 1 or N * it + 2 * rows * Kh * chunk * it + 8192 > 232448: continue
        trial(f"fwd 2wg c{chunk} s{rows * Kh} L{lag}", jax.jit(functools.partial(fwd_wg, eps=eps, programs=P, chunk=chunk, slots=rows * Kh, lag=lag, interpret=INTERP)), False, x, w, dy, light, small)
    for chunk, rows, lag in [(4096, 1, 0), (2048, 1, 0), (4096, 2, 1)]:
        Kh = N // chunk // 2
        if Kh < 1 or N * it + N * 4 + 2 * 2 * rows * Kh * chunk * it + 8192 > 232448: continue
        trial(f"bwd 2wg c{chunk} s{rows * Kh} L{lag}", jax.jit(functools.partial(bwd_wg, eps=eps, programs=P, chunk=chunk, slots=rows * Kh, lag=lag, interpret=INTERP)), True, x, w, dy, light, small)
    for chunk, slots, sw in [(4096, 4, False), (4096, 6, False), (2048, 4, False), (1024, 8, False), (4096, 2, True), (2048, 4, True)]:
        if N % chunk or (0 if sw else N * it) + N * 4 + slots * chunk * it * (3 if sw else 2) + 2048 > 232448: continue
        trial(f"bwd reread c{chunk} s{slots}" + (" w streamed" if sw else ""), jax.jit(functools.partial(bwd_rr, eps=eps, programs=P, chunk=chunk, slots=slots, stream_w=sw, interpret=INTERP)), True, x, w, dy, light, small)

if sys.argv[1] == "g4":  # g4 DTYPE N: two programs an SM
    name, N = sys.argv[2], int(sys.argv[3])
    dt, it, eps = jnp.dtype(name), jnp.dtype(name).itemsize, 1e-6
    M = TOTAL // N
    x, w, dy = data(dt, M, N)
    small = data(dt, 2 * NUM_SMS + 7 if ON_GPU else 5, N)
    light = 2 * x.nbytes / bench_ms(jax.jit(jnp.copy), x) * 1e-6
    print(f"{name} N={N} M={M}: copy {light:.0f} GB/s", flush=True)
    old = {}
    exec(compile(open(os.environ.get("OLD", os.path.join(os.path.dirname(os.path.abspath(__file__)), "old51.py"))).read().split("# The backward: dw in shared memory")[0].rsplit("# %%", 1)[0], "old51", "exec"), old)
    HALF = 232448 // 2 - 2048
    for per_sm in (1, 2):
        P = NUM_SMS * per_sm
        budget = 232448 - 4096 if per_sm == 1 else HALF
        for chunk in (2048, 4096):
            K = N // chunk
            for rows, lag in (((2, 1), (4, 1)) if per_sm == 1 else ((1, 0), (2, 1), (3, 1))):
                if K < 1 or N * it + rows * K * chunk * it > budget: continue
                for label, f in (("page", rms_norm_fwd), ("OLD", old["rms_norm_fwd"])):
                    trial(f"fwd {label} x{per_sm} c{chunk} s{rows * K} L{lag}", jax.jit(functools.partial(f, eps=eps, programs=P, chunk=chunk, slots=rows * K, lag=lag, interpret=INTERP)), False, x, w, dy, light, small)
        for chunk, slots, sw in [(4096, 4, False), (2048, 4, False), (2048, 3, True), (2048, 4, True), (1024, 8, True), (4096, 2, True)]:
            if N % chunk or (0 if sw else N * it) + N * 4 + slots * chunk * it * (3 if sw else 2) > budget: continue
            trial(f"bwd reread x{per_sm} c{chunk} s{slots}" + (" w streamed" if sw else ""), jax.jit(functools.partial(bwd_rr, eps=eps, programs=P, chunk=chunk, slots=slots, stream_w=sw, interpret=INTERP)), True, x, w, dy, light, small)

PLAN5 = {  # (programs an SM, parts, chunk, slots, w streamed)
    ("bfloat16", 16384): [(1, 2, 4096, 4, False), (2, 2, 2048, 4, False), (2, 4, 2048, 4, False), (2, 2, 4096, 2, True), (2, 4, 2048, 6, False)],
    ("bfloat16", 32768): [(1, 2, 4096, 4, False), (1, 2, 2048, 8, False), (1, 4, 4096, 4, False), (2, 4, 2048, 4, True), (2, 4, 4096, 2, True)],
    ("float32", 16384): [(1, 2, 4096, 3, False), (1, 2, 2048, 6, False), (2, 4, 2048, 3, True), (2, 4, 1024, 6, True)],
    ("float32", 32768): [(1, 2, 2048, 4, True), (1, 2, 4096, 2, True), (1, 2, 2048, 6, True), (1, 4, 2048, 4, True)],
    ("bfloat16", 2048): [(1, 2, 256, 4, False), (2, 4, 256, 3, True)], ("float32", 2048): [(1, 2, 512, 4, True)]}
if sys.argv[1] == "g5":  # g5 DTYPE N: parts a row without an exchange
    name, N = sys.argv[2], int(sys.argv[3])
    dt, it, eps = jnp.dtype(name), jnp.dtype(name).itemsize, 1e-6
    M = TOTAL // N
    x, w, dy = data(dt, M, N)
    small = data(dt, 2 * NUM_SMS + 7 if ON_GPU else 5, N)
    lights = [2 * x.nbytes / bench_ms(jax.jit(jnp.copy), x) * 1e-6 for _ in range(3)]
    light = max(lights)
    print(f"{name} N={N} M={M}: copy {' '.join(f'{l:.0f}' for l in lights)} GB/s", flush=True)
    for per_sm, parts, chunk, slots, sw in PLAN5[(name, N)]:
        P = (NUM_SMS * per_sm) // parts * parts if ON_GPU else 4
        trial(f"bwd parts {parts} x{per_sm} c{chunk} s{slots}" + (" w streamed" if sw else ""), jax.jit(functools.partial(bwd_parts, eps=eps, programs=P, parts=parts, chunk=chunk, slots=slots, stream_w=sw, interpret=INTERP)), True, x, w, dy, light, small)

if sys.argv[1] == "t6":  # CPU: the two-warpgroup kernels with one reducer, and their sm_90 lowering
    for M, N, chunk, slots, lag in [(5, 2048, 512, 4, 1), (7, 4096, 1024, 2, 0)]:
        for dt in (jnp.float32, jnp.bfloat16):
            x, w, dy = data(dt, M, N)
            yr, dxr, dwr = float64_vjp(x, w, dy)
            y = fwd_wg2(x, w, eps=1e-6, programs=3, chunk=chunk, slots=slots, lag=lag, interpret=True)
            dx, dw = bwd_wg2(x, w, dy, eps=1e-6, programs=3, chunk=chunk, slots=slots, lag=lag, interpret=True)
            print(M, N, jnp.dtype(dt).name, f"y {rel(y, yr):.1e} dx {rel(dx, dxr):.1e} dw {rel(dw, dwr):.1e}", flush=True)
    for dt, N, chunk, slots, lag in [("bfloat16", 16384, 2048, 8, 1), ("bfloat16", 32768, 4096, 8, 1)]:
        x = jax.ShapeDtypeStruct((1024, N), dt); w = jax.ShapeDtypeStruct((N,), dt)
        try:
            jax.jit(functools.partial(fwd_wg2, eps=1e-6, programs=132, chunk=chunk, slots=slots, lag=lag)).trace(x, w).lower(lowering_platforms=("cuda",))
            print("fwd lowered", dt, N)
        except Exception as e:
            print("fwd lower FAIL", dt, N, type(e).__name__, " ".join(str(e).split())[:400])
    x = jax.ShapeDtypeStruct((1024, 16384), "bfloat16"); w = jax.ShapeDtypeStruct((16384,), "bfloat16")
    try:
        jax.jit(functools.partial(bwd_wg2, eps=1e-6, programs=132, chunk=4096, slots=2, lag=0)).trace(x, w, x).lower(lowering_platforms=("cuda",))
        print("bwd lowered")
    except Exception as e:
        print("bwd lower FAIL", type(e).__name__, " ".join(str(e).split())[:400])

PLAN6 = {  # forward: (chunk, slots a warpgroup, lag); backward the same; baseline: the page's config and the reread
    ("bfloat16", 16384): ([(2048, 16, 2), (2048, 8, 1), (4096, 6, 1)], [(2048, 4, 0), (1024, 8, 0)]),
    ("bfloat16", 32768): ([(2048, 16, 1), (2048, 8, 0)], []),
    ("bfloat16", 8192): ([(2048, 4, 1), (2048, 6, 2), (1024, 8, 1)], [(2048, 2, 0), (2048, 4, 1), (1024, 8, 1)]),
    ("bfloat16", 2048): ([(512, 4, 1)], [(512, 2, 0)]), ("float32", 16384): ([(2048, 8, 1), (2048, 4, 0)], [])}
if sys.argv[1] == "g6":  # g6 DTYPE N: two warpgroups a program, one reducing
    name, N = sys.argv[2], int(sys.argv[3])
    dt, it, eps = jnp.dtype(name), jnp.dtype(name).itemsize, 1e-6
    M = TOTAL // N
    x, w, dy = data(dt, M, N)
    small = data(dt, 2 * NUM_SMS + 7 if ON_GPU else 5, N)
    lights = [2 * x.nbytes / bench_ms(jax.jit(jnp.copy), x) * 1e-6 for _ in range(3)]
    light = max(lights)
    print(f"{name} N={N} M={M}: copy {' '.join(f'{l:.0f}' for l in lights)} GB/s", flush=True)
    P = NUM_SMS if ON_GPU else 3
    fc, bc = _config(M, N, it), _config(M, N, it, backward=True)
    if fc[3] is not None:
        trial(f"fwd page c{fc[1]} s{fc[2]} L{fc[3]}", jax.jit(functools.partial(rms_norm_fwd, eps=eps, programs=P, chunk=fc[1], slots=fc[2], lag=fc[3], interpret=INTERP)), False, x, w, dy, light, small)
    fwds, bwds = PLAN6[(name, N)]
    for chunk, slots, lag in fwds:
        trial(f"fwd 2wg1r c{chunk} s{slots} L{lag}", jax.jit(functools.partial(fwd_wg2, eps=eps, programs=P, chunk=chunk, slots=slots, lag=lag, interpret=INTERP)), False, x, w, dy, light, small)
    if bc is not None and bc[1] == 1:
        trial(f"bwd page c{bc[2]} s{bc[3]} L{bc[4]}", jax.jit(functools.partial(rms_norm_bwd, eps=eps, groups=P, split=1, chunk=bc[2], slots=bc[3], lag=bc[4], interpret=INTERP)), True, x, w, dy, light, small)
    for chunk, slots, lag in bwds:
        trial(f"bwd 2wg1r c{chunk} s{slots} L{lag}", jax.jit(functools.partial(bwd_wg2, eps=eps, programs=P, chunk=chunk, slots=slots, lag=lag, interpret=INTERP)), True, x, w, dy, light, small)
    if N >= 4096 or not ON_GPU:
        trial("bwd reread c4096 s4" if N % 4096 == 0 else "bwd reread c512 s4", jax.jit(functools.partial(bwd_rr, eps=eps, programs=P, chunk=4096 if N % 4096 == 0 else 512, slots=4, interpret=INTERP)), True, x, w, dy, light, small)

PLAN7 = {  # (wgs, chunk, slots a warpgroup, lag)
    ("bfloat16", 16384): ([(4, 1024, 8, 1), (4, 2048, 4, 1), (4, 1024, 4, 0), (4, 512, 16, 1), (2, 4096, 6, 1)],
                          [(4, 1024, 4, 0), (4, 512, 8, 0), (2, 2048, 4, 0)]),
    ("bfloat16", 32768): ([(4, 2048, 4, 0), (4, 1024, 8, 0), (4, 1024, 16, 1), (2, 2048, 8, 0)], []),
    ("bfloat16", 8192): ([(4, 1024, 4, 1), (4, 512, 8, 1), (4, 1024, 6, 2)], [(4, 1024, 2, 0), (4, 1024, 4, 1), (4, 512, 8, 1), (2, 2048, 2, 0)]),
    ("float32", 16384): ([(4, 1024, 8, 1), (4, 1024, 4, 0)], []),
    ("bfloat16", 2048): ([(4, 256, 4, 1), (2, 512, 4, 1)], [(4, 256, 2, 0), (2, 256, 8, 1)])}
if sys.argv[1] == "g7":
    name, N = sys.argv[2], int(sys.argv[3])
    dt, it, eps = jnp.dtype(name), jnp.dtype(name).itemsize, 1e-6
    M = TOTAL // N
    x, w, dy = data(dt, M, N)
    small = data(dt, 2 * NUM_SMS + 7 if ON_GPU else 5, N)
    lights = [2 * x.nbytes / bench_ms(jax.jit(jnp.copy), x) * 1e-6 for _ in range(3)]
    light = sorted(lights)[1]
    print(f"{name} N={N} M={M}: copy {' '.join(f'{l:.0f}' for l in lights)} GB/s (median taken)", flush=True)
    P = NUM_SMS if ON_GPU else 3
    fwds, bwds = PLAN7[(name, N)]
    for wgs, chunk, slots, lag in fwds:
        trial(f"fwd {wgs}wg c{chunk} s{slots} L{lag}", jax.jit(functools.partial(fwd_wgn, eps=eps, programs=P, wgs=wgs, chunk=chunk, slots=slots, lag=lag, interpret=INTERP)), False, x, w, dy, light, small)
    for wgs, chunk, slots, lag in bwds:
        trial(f"bwd {wgs}wg c{chunk} s{slots} L{lag}", jax.jit(functools.partial(bwd_wgn, eps=eps, programs=P, wgs=wgs, chunk=chunk, slots=slots, lag=lag, interpret=INTERP)), True, x, w, dy, light, small)

PLAN8 = {  # forward (wgs, chunk, slots, lag); backward (wgs, chunk, slots, lag) or ("parts", parts, chunk, slots, stream_w) or ("rr", chunk, slots)
    ("bfloat16", 16384): ([(4, 1024, 8, 0), (2, 2048, 8, 0), (2, 2048, 12, 0), (2, 4096, 4, 0), (4, 2048, 4, 0), (2, 4096, 6, 1)],
                          [(4, 1024, 4, 0), (2, 2048, 4, 0), (4, 2048, 2, 0), (2, 4096, 2, 0)]),
    ("bfloat16", 32768): ([(4, 1024, 8, 0), (2, 2048, 8, 0), (2, 4096, 4, 0)], [("rr", 2048, 4)]),
    ("float32", 16384): ([(4, 1024, 4, 0), (2, 2048, 4, 0), (4, 2048, 2, 0)], [("parts", 2, 2048, 6, False), ("rr", 2048, 6)]),
    ("float32", 32768): ([], [("parts", 2, 4096, 2, True)]),
    ("bfloat16", 2048): ([(2, 512, 4, 0)], [(2, 256, 4, 0), ("parts", 2, 256, 4, False), ("rr", 512, 3)])}
if sys.argv[1] == "g8":
    name, N = sys.argv[2], int(sys.argv[3])
    dt, it, eps = jnp.dtype(name), jnp.dtype(name).itemsize, 1e-6
    M = TOTAL // N
    x, w, dy = data(dt, M, N)
    small = data(dt, 2 * NUM_SMS + 7 if ON_GPU else 5, N)
    lights = [2 * x.nbytes / bench_ms(jax.jit(jnp.copy), x) * 1e-6 for _ in range(3)]
    light = sorted(lights)[1]
    print(f"{name} N={N} M={M}: copy {' '.join(f'{l:.0f}' for l in lights)} GB/s (median taken)", flush=True)
    P = NUM_SMS if ON_GPU else 4
    fwds, bwds = PLAN8[(name, N)]
    for wgs, chunk, slots, lag in fwds:
        trial(f"fwd {wgs}wg c{chunk} s{slots} L{lag}", jax.jit(functools.partial(fwd_wgn, eps=eps, programs=P, wgs=wgs, chunk=chunk, slots=slots, lag=lag, interpret=INTERP)), False, x, w, dy, light, small)
    for b in bwds:
        if b[0] == "parts":
            _, parts, chunk, slots, sw = b
            trial(f"bwd parts {parts} c{chunk} s{slots}" + (" w streamed" if sw else ""), jax.jit(functools.partial(bwd_parts, eps=eps, programs=P, parts=parts, chunk=chunk, slots=slots, stream_w=sw, interpret=INTERP)), True, x, w, dy, light, small)
        elif b[0] == "rr":
            trial(f"bwd reread c{b[1]} s{b[2]}", jax.jit(functools.partial(bwd_rr, eps=eps, programs=P, chunk=b[1], slots=b[2], interpret=INTERP)), True, x, w, dy, light, small)
        else:
            wgs, chunk, slots, lag = b
            trial(f"bwd {wgs}wg c{chunk} s{slots} L{lag}", jax.jit(functools.partial(bwd_wgn, eps=eps, programs=P, wgs=wgs, chunk=chunk, slots=slots, lag=lag, interpret=INTERP)), True, x, w, dy, light, small)

PLAN9 = {  # ("f", wgs, chunk, slots) forward read twice; ("b", wgs, chunk, slots, stream_w) backward read twice
    ("bfloat16", 32768): [("b", 2, 512, 4, False), ("b", 2, 512, 5, False), ("b", 4, 512, 4, True), ("b", 2, 1024, 4, True), ("b", 2, 1024, 3, True)],
    ("float32", 32768): [("f", 4, 1024, 4), ("f", 2, 2048, 4), ("f", 2, 1024, 8), ("b", 4, 512, 2, True), ("b", 2, 512, 4, True), ("b", 2, 1024, 3, True)],
    ("bfloat16", 16384): [("b", 2, 1024, 4, False), ("b", 4, 1024, 4, False), ("b", 4, 512, 4, False)],
    ("float32", 2048): [("f", 2, 256, 3), ("b", 2, 256, 3, True), ("b", 4, 256, 2, False)],
    ("bfloat16", 2048): [("f", 4, 256, 2), ("b", 2, 256, 4, False), ("b", 4, 256, 2, True)]}
if sys.argv[1] in ("g9", "l9"):
    name, N = sys.argv[2], int(sys.argv[3])
    dt, it, eps = jnp.dtype(name), jnp.dtype(name).itemsize, 1e-6
    P = NUM_SMS if ON_GPU else 4
    if sys.argv[1] == "l9":  # lower each for sm_90 on a CPU
        xa, wa = jax.ShapeDtypeStruct((1024, N), name), jax.ShapeDtypeStruct((N,), name)
        for d in PLAN9[(name, N)]:
            try:
                if d[0] == "f":
                    jax.jit(functools.partial(fwd_rrn, eps=eps, programs=132, wgs=d[1], chunk=d[2], slots=d[3])).trace(xa, wa).lower(lowering_platforms=("cuda",))
                else:
                    jax.jit(functools.partial(bwd_rrn, eps=eps, programs=132, wgs=d[1], chunk=d[2], slots=d[3], stream_w=d[4])).trace(xa, wa, xa).lower(lowering_platforms=("cuda",))
                print("ok  ", d)
            except Exception as e:
                print("FAIL", d, " ".join(str(e).split())[:150])
        sys.exit()
    M = TOTAL // N
    x, w, dy = data(dt, M, N)
    small = data(dt, 2 * NUM_SMS + 7 if ON_GPU else 5, N)
    lights = [2 * x.nbytes / bench_ms(jax.jit(jnp.copy), x) * 1e-6 for _ in range(3)]
    light = sorted(lights)[1]
    print(f"{name} N={N} M={M}: copy {' '.join(f'{l:.0f}' for l in lights)} GB/s (median taken)", flush=True)
    for d in PLAN9[(name, N)]:
        if d[0] == "f":
            trial(f"fwd reread {d[1]}wg c{d[2]} s{d[3]}", jax.jit(functools.partial(fwd_rrn, eps=eps, programs=P, wgs=d[1], chunk=d[2], slots=d[3], interpret=INTERP)), False, x, w, dy, light, small)
        else:
            trial(f"bwd reread {d[1]}wg c{d[2]} s{d[3]}" + (" w streamed" if d[4] else ""), jax.jit(functools.partial(bwd_rrn, eps=eps, programs=P, wgs=d[1], chunk=d[2], slots=d[3], stream_w=d[4], interpret=INTERP)), True, x, w, dy, light, small)

PLAN10 = {  # (wgs, chunk, slots a warpgroup, lag): backward with dw in registers
    ("bfloat16", 32768): [(4, 1024, 8, 0), (4, 2048, 4, 0), (2, 2048, 8, 0), (4, 1024, 4, 0), (8, 1024, 2, 0)],
    ("bfloat16", 16384): [(2, 2048, 4, 0), (4, 1024, 4, 0)],
    ("float32", 16384): [(4, 1024, 4, 0), (2, 2048, 4, 0), (8, 1024, 2, 0)],
    ("float32", 8192): [(4, 1024, 2, 0)],
    ("bfloat16", 2048): [(2, 256, 4, 0), (4, 256, 4, 1), (8, 256, 1, 0)], ("float32", 2048): [(2, 512, 4, 1)]}
if sys.argv[1] in ("g10", "l10"):
    name, N = sys.argv[2], int(sys.argv[3])
    dt, it, eps = jnp.dtype(name), jnp.dtype(name).itemsize, 1e-6
    P = NUM_SMS if ON_GPU else 3
    if sys.argv[1] == "l10":
        xa, wa = jax.ShapeDtypeStruct((1024, N), name), jax.ShapeDtypeStruct((N,), name)
        for d in PLAN10[(name, N)]:
            try:
                jax.jit(functools.partial(bwd_wgr, eps=eps, programs=132, wgs=d[0], chunk=d[1], slots=d[2], lag=d[3])).trace(xa, wa, xa).lower(lowering_platforms=("cuda",))
                print("ok  ", d)
            except Exception as e:
                print("FAIL", d, " ".join(str(e).split())[:150])
        sys.exit()
    M = TOTAL // N
    x, w, dy = data(dt, M, N)
    small = data(dt, 2 * NUM_SMS + 7 if ON_GPU else 5, N)
    lights = [2 * x.nbytes / bench_ms(jax.jit(jnp.copy), x) * 1e-6 for _ in range(3)]
    light = sorted(lights)[1]
    print(f"{name} N={N} M={M}: copy {' '.join(f'{l:.0f}' for l in lights)} GB/s (median taken)", flush=True)
    for d in PLAN10[(name, N)]:
        trial(f"bwd dw in SMEM {d[0]}wg c{d[1]} s{d[2]} L{d[3]}", jax.jit(functools.partial(bwd_wgn, eps=eps, programs=P, wgs=d[0], chunk=d[1], slots=d[2], lag=d[3], interpret=INTERP)), True, x, w, dy, light, small)
        trial(f"bwd dw-in-registers {d[0]}wg c{d[1]} s{d[2]} L{d[3]}", jax.jit(functools.partial(bwd_wgr, eps=eps, programs=P, wgs=d[0], chunk=d[1], slots=d[2], lag=d[3], interpret=INTERP)), True, x, w, dy, light, small)
