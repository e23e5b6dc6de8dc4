"""Probe: tutorial 02's forward kernel as the page has it against a shorter one (one way of storing the rows'
statistics: the tile-shaped store masked to column 0 at every width; the padding's mask applied once), at the page's
config, bf16 and fp32, M * N = 2**26, N = 512 .. 32768. Prints GB/s (x read, y written) per variant and point, and
checks that both give the same bits. Run on a GPU: python probe/ln_short.py"""

import torch
import triton
import triton.language as tl

TOTAL = 2**26
SWEEP_N = [2**k for k in range(9, 16)]  # the page's sweep inside MAX_FUSED_N (65536 takes torch's path)


@triton.jit
def page_kernel(
    x_ptr,
    y_ptr,
    w_ptr,
    b_ptr,
    mean_ptr,
    rstd_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    y_row_stride,
    eps,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    k: tl.constexpr = 2.0**-16 / BLOCK_N
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # a program a block of rows
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)  # int64: M * N may pass 2**31
    x = tl.load(
        x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0, cache_modifier=".cg"
    ).to(tl.float32)
    x0 = tl.load(x_ptr + rows * x_row_stride).to(tl.float32) * k  # each row's first value (an L2 hit), times k
    t = tl.where(col_ok[None, :], x * k - x0[:, None], 0.0)
    md = tl.sum(t, axis=1) / n_cols
    xc = tl.where(col_ok[None, :], t - md[:, None], 0.0)
    q = tl.sum(xc * xc, axis=1) / n_cols  # the variance times k**2; past fp32's range, NaN (as torch's)
    rstd = tl.where(q < float("inf"), k / tl.sqrt(q + eps * k * k), float("nan"))
    mean, rstd = (x0 + md) / k, tl.where(q == 0, 1.0 / tl.sqrt(eps), rstd)  # q == 0: a constant row, as torch
    y = xc * (1 / k) * rstd[:, None]
    y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :] if HAS_W else y
    y = y + tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :] if HAS_B else y
    tl.store(
        y_ptr + rows[:, None] * y_row_stride + cols[None, :],
        y.to(y_ptr.dtype.element_ty),
        mask=row_ok[:, None] & col_ok[None, :],
    )
    if BLOCK_N >= 512:  # a row over whole warps: its statistics stored plainly
        tl.store(mean_ptr + rows, mean, mask=row_ok)
        tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    else:  # several rows a warp: column 0's thread stores; + cols keeps the tile's layout (no shared memory)
        first = row_ok[:, None] & (cols == 0)[None, :]
        tl.store(mean_ptr + rows[:, None] + cols[None, :], tl.broadcast_to(mean[:, None], x.shape), mask=first)
        tl.store(rstd_ptr + rows[:, None] + cols[None, :], tl.broadcast_to(rstd[:, None], x.shape), mask=first)


@triton.jit
def short_kernel(
    x_ptr,
    y_ptr,
    w_ptr,
    b_ptr,
    mean_ptr,
    rstd_ptr,
    n_rows,
    n_cols,
    x_row_stride,
    y_row_stride,
    eps,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # a program a block of rows
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)  # int64: M * N may pass 2**31
    x = tl.load(
        x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=col_ok[None, :], other=0.0, cache_modifier=".cg"
    ).to(tl.float32)
    k: tl.constexpr = 2.0**-16 / BLOCK_N
    x0 = tl.load(x_ptr + rows * x_row_stride).to(tl.float32) * k
    md = tl.sum(tl.where(col_ok[None, :], x * k - x0[:, None], 0.0), axis=1) / n_cols
    xc = tl.where(col_ok[None, :], x * k - x0[:, None] - md[:, None], 0.0)
    q = tl.sum(xc * xc, axis=1) / n_cols
    rstd = tl.where(q < float("inf"), k / tl.sqrt(q + eps * k * k), float("nan"))
    mean, rstd = (x0 + md) / k, tl.where(q == 0, 1.0 / tl.sqrt(eps), rstd)
    y = xc * (1 / k) * rstd[:, None]
    y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :] if HAS_W else y
    y = y + tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :] if HAS_B else y
    tl.store(
        y_ptr + rows[:, None] * y_row_stride + cols[None, :],
        y.to(y_ptr.dtype.element_ty),
        mask=row_ok[:, None] & col_ok[None, :],
    )
    first = row_ok[:, None] & (cols == 0)[None, :]
    tl.store(mean_ptr + rows[:, None] + cols[None, :], tl.broadcast_to(mean[:, None], x.shape), mask=first)
    tl.store(rstd_ptr + rows[:, None] + cols[None, :], tl.broadcast_to(rstd[:, None], x.shape), mask=first)


def _warps(n_elements, element_size, bytes_per_thread, least=4):  # the page's
    return min(32, max(least, n_elements * element_size // (32 * bytes_per_thread)))


def programs_per_sm(kernel, args, meta):  # the page's occupancy query, uncached
    props, threads = torch.cuda.get_device_properties(0), 32 * meta["num_warps"]
    compiled = kernel.warmup(*args, grid=(1,), **meta)
    compiled._init_handles()
    smem = compiled.metadata.shared
    return max(
        1,
        min(
            props.max_threads_per_multi_processor // threads,
            props.regs_per_multiprocessor // (max(compiled.n_regs, 1) * threads),
            props.shared_memory_per_multiprocessor // smem if smem else 32,
        ),
    )


def config(kernel, args, n_rows, n_cols, element_size):  # the page's _fwd_config
    block_m = max(1, 4096 // (block_n := triton.next_power_of_2(n_cols)))
    bytes_per_thread, least = (128, 2) if block_n == 512 else (64, 4)
    warps = _warps(block_m * block_n, element_size, bytes_per_thread, least)
    meta = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps)
    flags = dict(HAS_W=True, HAS_B=True)
    if n_rows > block_m and programs_per_sm(kernel, args, meta | flags) * block_m * block_n * element_size < 40960:
        meta["BLOCK_M"] = 2 * block_m
    return meta | flags, triton.cdiv(n_rows, meta["BLOCK_M"])


def main():
    torch.cuda.set_stream(torch.cuda.Stream())
    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__} · Triton {triton.__version__}")
    print(f"{'dtype':>8} {'N':>6} {'meta':>36} {'page GB/s':>10} {'short GB/s':>11} {'short/page':>10}")
    for dtype in (torch.bfloat16, torch.float32):
        for n in SWEEP_N:
            m = TOTAL // n
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
            outs, gbs = {}, {}
            for name, kernel in (("page", page_kernel), ("short", short_kernel)):
                y, mean, rstd = torch.empty_like(x), torch.empty(m, device="cuda"), torch.empty(m, device="cuda")
                args = (x, y, w, b, mean, rstd, m, n, x.stride(0), y.stride(0), 1e-5)
                meta, grid = config(kernel, args, m, n, x.element_size())
                run = lambda: kernel[(grid,)](*args, **meta)
                run()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=torch.cuda.current_stream()):
                    run()
                ms = triton.testing.do_bench(graph.replay, warmup=25, rep=200, return_mode="median")
                gbs[name], outs[name] = 2 * x.numel() * x.element_size() / ms * 1e-6, (y, mean, rstd)
            same = all(torch.equal(a, b) for a, b in zip(outs["page"], outs["short"]))
            print(
                f"{str(dtype)[6:]:>8} {n:>6} {str({k: meta[k] for k in ('BLOCK_M', 'BLOCK_N', 'num_warps')}):>36} "
                f"{gbs['page']:>10,.0f} {gbs['short']:>11,.0f} {gbs['short'] / gbs['page']:>10.3f}"
                + ("" if same else "  DIFFERENT BITS")
            )


if __name__ == "__main__":
    main()
