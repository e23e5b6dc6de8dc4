# fwd_ab: page 51's forward with ablations (timing only where noted). exec'd in the page's namespace.
@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "slots", "outs", "mode"))
def fwd_ab(x, w, *, eps, programs, wgs, chunk, slots, outs, mode):
    # mode: full (the page) | nohand (no hand-over: rstd of a constant, wrong y) | noy (no y: reads and sums only)
    #       | copy (each chunk stored from its ring slot, no registers) | lag (row i's y written after row i+1's sums)
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh, batch = K // wgs, min(slots, K // wgs)
    x4, w3 = x.reshape(M, K, T, LANES), w.reshape(K, T, LANES)
    def body(x_gmem, w_gmem, y_gmem, w_smem, ring, out, w_bar, bars, *hand_over):
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
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
        n_mine = (M - p + programs - 1) // programs
        if mode == "copy":
            def cstep(i, carry):
                row = p + i * programs
                for c in range(Kh):
                    s = h * slots + (i * Kh + c) % slots
                    plgpu.barrier_wait(bars.at[s])
                    plgpu.copy_smem_to_gmem(ring.at[s], y_gmem.at[row, h * Kh + c])
                    if (c + 1) % batch == 0 or c == Kh - 1:
                        plgpu.wait_smem_to_gmem(0, wait_read_only=True)
                        for d in range(c - c % batch, c + 1):
                            fetch(i * Kh + d + slots)
                return carry
            jax.lax.fori_loop(0, n_mine, cstep, 0)
            plgpu.wait_smem_to_gmem(0)
            return
        def read(i):
            xs, sq = [], 0.0
            for c in range(Kh):
                s = h * slots + (i * Kh + c) % slots
                plgpu.barrier_wait(bars.at[s])
                xs.append(ring[s])
                x_c = xs[c].astype(jnp.float32)
                sq = sq + x_c * x_c
                if (c + 1) % batch == 0 or c == Kh - 1:
                    plgpu.commit_smem()
                    for d in range(c - c % batch, c + 1):
                        fetch(i * Kh + d + slots)
            return xs, sq
        def write(i, xs, rstd):
            row = p + i * programs
            for c in range(Kh):
                o = h * outs + (i * Kh + c) % outs
                plgpu.wait_smem_to_gmem(outs - 1, wait_read_only=True)
                out[o] = (xs[c].astype(jnp.float32) * rstd * w_smem[h * Kh + c].astype(jnp.float32)).astype(out.dtype)
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(out.at[o], y_gmem.at[row, h * Kh + c])
        if mode == "lag":  # row i + 1's chunks and sums, then row i's y, then row i + 1's totals
            xs0, sq0 = read(0)
            (s0,) = _hand_over(h, wgs, (sq0,), *hand_over)
            def lstep(i, carry):
                xs, rstd = carry
                xn, sqn = read(i + 1)  # past the end: reads slots that were never fetched -> guarded below
                red, tot, part_bar, done_bar = hand_over
                @pl.when(h > 0)
                def _():
                    red[0, h - 1] = sqn
                plgpu.barrier_arrive(part_bar)
                write(i, xs, rstd)
                plgpu.barrier_wait(part_bar)
                @pl.when(h == 0)
                def _():
                    tot[0] = jnp.sum(sum((red[0, o] for o in range(wgs - 1)), sqn))
                    plgpu.barrier_arrive(done_bar)
                @pl.when(h > 0)
                def _():
                    plgpu.barrier_wait(done_bar)
                return xn, jax.lax.rsqrt(tot[0] / N + eps)
            xs, rstd = jax.lax.fori_loop(0, n_mine - 1, lstep, (xs0, jax.lax.rsqrt(s0 / N + eps)))
            write(n_mine - 1, xs, rstd)
            plgpu.wait_smem_to_gmem(0)
            return
        def step(i, carry):
            xs, sq = read(i)
            if mode == "nohand":
                sum_sq = jnp.float32(N)
            else:
                (sum_sq,) = _hand_over(h, wgs, (sq,), *hand_over)
            rstd = jax.lax.rsqrt(sum_sq / N + eps)
            if mode != "noy":
                write(i, xs, rstd)
            return carry
        jax.lax.fori_loop(0, n_mine, step, 0)
        plgpu.wait_smem_to_gmem(0)
    scratch = [plgpu.SMEM((K, T, LANES), w.dtype), plgpu.SMEM((wgs * slots, T, LANES), x.dtype),
               plgpu.SMEM((wgs * outs, T, LANES), x.dtype), plgpu.Barrier(num_barriers=wgs),
               plgpu.Barrier(num_barriers=wgs * slots)] + _hand_over_scratch(1, wgs, T)
    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x4.shape, x.dtype), grid=(programs,), grid_names=("p",),
                        num_threads=wgs, thread_name="wg", scratch_types=scratch, interpret=MOSAIC_INTERPRET)(x4, w3).reshape(M, N)

@functools.partial(jax.jit, static_argnames=("eps", "programs", "wgs", "chunk", "ahead", "wg"))
def fwd_ld(x, w, *, eps, programs, wgs, chunk, ahead=1, wg=False):
    # x and y straight between GMEM and registers (vector loads and stores, no TMA, no ring); the next row's loads
    # issued before this row's hand-over (ahead=1) or not (ahead=0); w in SMEM
    (M, N), K, T = x.shape, x.shape[1] // chunk, chunk // LANES
    Kh = K // wgs
    x4, w3 = x.reshape(M, K, T, LANES), w.reshape(K, T, LANES)
    def body(x_gmem, w_gmem, y_gmem, *rest):
        w_smem, w_bar, hand_over = (None, rest[0], rest[1:]) if wg else (rest[0], rest[1], rest[2:])
        p, h = jax.lax.axis_index("p"), jax.lax.axis_index("wg")
        if not wg:
            plgpu.copy_gmem_to_smem(w_gmem.at[pl.ds(h * Kh, Kh)], w_smem.at[pl.ds(h * Kh, Kh)], w_bar.at[h])
        n_mine = (M - p + programs - 1) // programs
        def load(i):
            row = jnp.minimum(p + i * programs, M - 1)  # past the end: the last row again, unused
            return [x_gmem[row, h * Kh + c] for c in range(Kh)]
        if not wg:
            plgpu.barrier_wait(w_bar.at[h])
        wsrc = w_gmem if wg else w_smem
        def step(i, xs):
            row = p + i * programs
            if ahead:
                nxt = load(i + 1)
            else:
                xs = load(i)
            sq = 0.0
            for c in range(Kh):
                x_c = xs[c].astype(jnp.float32)
                sq = sq + x_c * x_c
            (sum_sq,) = _hand_over(h, wgs, (sq,), *hand_over)
            rstd = jax.lax.rsqrt(sum_sq / N + eps)
            for c in range(Kh):
                y_gmem[row, h * Kh + c] = (xs[c].astype(jnp.float32) * rstd * wsrc[h * Kh + c].astype(jnp.float32)).astype(y_gmem.dtype)
            return nxt if ahead else xs
        jax.lax.fori_loop(0, n_mine, step, load(0))
    scratch = ([] if wg else [plgpu.SMEM((K, T, LANES), w.dtype)]) + [plgpu.Barrier(num_barriers=wgs)] + _hand_over_scratch(1, wgs, T)
    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x4.shape, x.dtype), grid=(programs,), grid_names=("p",),
                        num_threads=wgs, thread_name="wg", scratch_types=scratch, interpret=MOSAIC_INTERPRET)(x4, w3).reshape(M, N)
