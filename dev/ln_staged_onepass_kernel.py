@gluon.jit
def ln_staged_onepass_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_cols, x_row_stride, y_row_stride, eps,
    HAS_W: gl.constexpr, HAS_B: gl.constexpr, CHUNKS: gl.constexpr, VEC: gl.constexpr, REP: gl.constexpr,
    EVEN: gl.constexpr,
):
    """One program per row: the row copied into shared memory once, then three passes over it."""
    # VEC contiguous elements (16 bytes) per thread, 32 threads per warp, the warps side by side; a chunk
    # is REP such runs per thread
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])
    CHUNK: gl.constexpr = VEC * 32 * gl.num_warps() * REP
    if EVEN:  # the row is a whole number of chunks: with a constant length every mask folds away
        n_cols = CHUNKS * CHUNK
    row = gl.program_id(0).to(gl.int64)
    cols = gl.arange(0, CHUNK, layout=layout)
    x_row = x_ptr + row * x_row_stride
    x_smem = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [CHUNKS, CHUNK],
                                       gl.SwizzledSharedLayout(1, 1, 1, [0]))
    for c in gl.static_range(CHUNKS):  # issue every copy at once, one commit group per chunk
        async_load(x_smem.index(c), x_row + c * CHUNK + cols, mask=cols < n_cols - c * CHUNK)
        async_copy.commit_group()
    # one pass: each thread's sums of x - k, (x - k)^2 with k its own element of chunk 0 (a nearby value)
    async_copy.wait_group(CHUNKS - 1)
    k = x_smem.index(0).load(layout).to(gl.float32)
    s1 = gl.zeros([CHUNK], gl.float32, layout)
    s2 = gl.zeros([CHUNK], gl.float32, layout)
    for c in gl.static_range(CHUNKS):
        async_copy.wait_group(CHUNKS - 1 - c)
        d = gl.where(cols < n_cols - c * CHUNK, x_smem.index(c).load(layout).to(gl.float32) - k, 0.0)
        s1 += d
        s2 += d * d
    n_p = (CHUNKS - 1) + (cols < n_cols - (CHUNKS - 1) * CHUNK).to(gl.float32)  # elements at this position
    mean = gl.sum(s1 + n_p * k, axis=0) / n_cols
    dm = mean - k
    rstd = 1.0 / gl.sqrt(gl.sum(s2 - 2.0 * dm * s1 + n_p * dm * dm, axis=0) / n_cols + eps)
    y_row = y_ptr + row * y_row_stride
    for c in range(CHUNKS):
        col_ok = cols < n_cols - c * CHUNK
        y = (x_smem.index(c).load(layout).to(gl.float32) - mean) * rstd
        if HAS_W:
            y = y * gl.load(w_ptr + c * CHUNK + cols, mask=col_ok, other=0.0).to(gl.float32)
        if HAS_B:
            y = y + gl.load(b_ptr + c * CHUNK + cols, mask=col_ok, other=0.0).to(gl.float32)
        gl.store(y_row + c * CHUNK + cols, y.to(y_ptr.dtype.element_ty), mask=col_ok)
    gl.store(mean_ptr + row, mean)
    gl.store(rstd_ptr + row, rstd)


