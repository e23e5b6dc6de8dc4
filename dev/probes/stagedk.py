import triton, triton.language as tl

@triton.jit
def bwd_staged(x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr,
               n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride,
               HAS_W: tl.constexpr, COMPUTE_DWDB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), n_programs, num_stages=STAGES):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        rows = rows.to(tl.int64)
        ok = row_ok[:, None] & col_ok[None, :]
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + rows, mask=row_ok, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
        x_hat = tl.where(col_ok[None, :], (x - mean[:, None]) * rstd[:, None], 0.0)
        g = dy * w[None, :]
        c1 = tl.sum(x_hat * g, axis=1) / n_cols
        c2 = tl.sum(g, axis=1) / n_cols
        dx = (g - (x_hat * c1[:, None] + c2[:, None])) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=ok)
        dw_acc += dy * x_hat
        db_acc += dy
    offs = tl.cast(pid, tl.int64) * n_cols + cols
    tl.store(dw_partial_ptr + offs, tl.sum(dw_acc, axis=0), mask=col_ok)
    tl.store(db_partial_ptr + offs, tl.sum(db_acc, axis=0), mask=col_ok)

