"""Dev only: bf16 rows of exactly 32768 columns (2048 rows), layer norm and softmax forwards written in
Gluon (Triton's explicit-layout dialect), against the pages' own launchers. Plain Triton stops near 94% of
copy bandwidth here: one 32-warp program per SM cannot overlap a row's load, reductions and store, and the
layer norm re-reads w and b from L2 for every row. The Gluon kernels are persistent (grid = SMs):

  LN  NBUF=0  w, b copied ONCE per program into shared memory (2 x 64 KB), x loaded global -> registers.
  LN  NBUF=1  as above, and the next row of x is copied global -> shared (cp.async) while this row is
              computed from registers (192 KB of shared memory).
  SM  NBUF=0  persistent, x global -> registers (the Gluon baseline).
  SM  NBUF=k  k rows of x in flight in k shared buffers of 64 KB (k = 1, 2, 3).

Per iteration with NBUF > 0: wait for this row's copy (cp.async.wait_group NBUF-1), shared -> registers,
barrier, issue the copy of the row NBUF rows ahead into the buffer just read, compute and store.
Kernel-only, CUDA-graph timed, % of an eager copy, checked against float64. Compiled offline for sm_90 with
Triton 3.6 (ptxas, sm_90a: no spills; 32 warps 54-64 registers, 16 warps 90-128); not yet run on a GPU.

PYTHONUNBUFFERED=1 python3 dev/gluon_wide_gpu.py
"""
import time

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

# cp.async global -> shared: async_copy_global_to_shared in Triton 3.6, renamed async_load later (3.9 raises
# on the old name)
async_load = getattr(cp, "async_load", None) or cp.async_copy_global_to_shared
# CTA-wide barrier: gl.thread_barrier in Triton 3.6, gl.barrier in 3.9
barrier = getattr(gl, "barrier", None) or gl.thread_barrier

# ---- kernels ----


@gluon.jit
def ln_gluon_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_rows, xs, ys, eps,
                    N: gl.constexpr, NW: gl.constexpr, NBUF: gl.constexpr, VEC: gl.constexpr):
    # each thread owns N / (32 * NW) elements as contiguous VEC-element (16-byte) vectors, warps side by side
    L: gl.constexpr = gl.BlockedLayout([VEC], [32], [NW], [0])
    S1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    cols = gl.arange(0, N, layout=L)
    pid = gl.program_id(0)
    P = gl.num_programs(0)
    w_s = gl.allocate_shared_memory(w_ptr.dtype.element_ty, [N], S1)
    b_s = gl.allocate_shared_memory(b_ptr.dtype.element_ty, [N], S1)
    async_load(w_s, w_ptr + cols)
    async_load(b_s, b_ptr + cols)
    cp.commit_group()
    if NBUF > 0:
        x_s = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [NBUF, N], S1)
        for s in gl.static_range(NBUF):
            r = pid + s * P
            if r < n_rows:
                async_load(x_s.index(s), x_ptr + r.to(gl.int64) * xs + cols)
            cp.commit_group()
    else:
        cp.wait_group(0)
        barrier()
    slot = pid * 0
    for row in range(pid, n_rows, P):
        if NBUF > 0:
            cp.wait_group(NBUF - 1)  # this row's copy (and w, b) landed, NBUF - 1 later rows may be in flight
            barrier()
            x = x_s.index(slot).load(L).to(gl.float32)
            barrier()  # everyone has read the buffer before it is overwritten
            nr = row + NBUF * P
            if nr < n_rows:
                async_load(x_s.index(slot), x_ptr + nr.to(gl.int64) * xs + cols)
            cp.commit_group()  # possibly empty: keeps one group per row
            slot = (slot + 1) % NBUF
        else:
            x = gl.load(x_ptr + row.to(gl.int64) * xs + cols).to(gl.float32)
        mean = gl.sum(x, axis=0) / N
        xc = x - mean
        var = gl.sum(xc * xc, axis=0) / N
        rstd = 1.0 / gl.sqrt(var + eps)
        w = w_s.load(L).to(gl.float32)
        b = b_s.load(L).to(gl.float32)
        y = xc * rstd * w + b
        gl.store(y_ptr + row.to(gl.int64) * ys + cols, y.to(y_ptr.dtype.element_ty))
        gl.store(mean_ptr + row, mean)
        gl.store(rstd_ptr + row, rstd)


@gluon.jit
def sm_gluon_kernel(x_ptr, y_ptr, n_rows, xs, ys,
                    N: gl.constexpr, NW: gl.constexpr, NBUF: gl.constexpr, VEC: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([VEC], [32], [NW], [0])
    S1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    cols = gl.arange(0, N, layout=L)
    pid = gl.program_id(0)
    P = gl.num_programs(0)
    if NBUF > 0:
        x_s = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [NBUF, N], S1)
        for s in gl.static_range(NBUF):
            r = pid + s * P
            if r < n_rows:
                async_load(x_s.index(s), x_ptr + r.to(gl.int64) * xs + cols)
            cp.commit_group()
    slot = pid * 0
    for row in range(pid, n_rows, P):
        if NBUF > 0:
            cp.wait_group(NBUF - 1)
            barrier()
            x = x_s.index(slot).load(L).to(gl.float32)
            barrier()
            nr = row + NBUF * P
            if nr < n_rows:
                async_load(x_s.index(slot), x_ptr + nr.to(gl.int64) * xs + cols)
            cp.commit_group()
            slot = (slot + 1) % NBUF
        else:
            x = gl.load(x_ptr + row.to(gl.int64) * xs + cols).to(gl.float32)
        e = gl.exp(x - gl.max(x, axis=0))
        y = e * (1.0 / gl.sum(e, axis=0))
        gl.store(y_ptr + row.to(gl.int64) * ys + cols, y.to(y_ptr.dtype.element_ty))


# ---- end kernels ----


def ln_gluon(x, y, w, b, mean, rstd, eps, warps=32, nbuf=1, grid=None):
    m, n = x.shape
    assert x.stride(1) == 1 and y.stride(1) == 1 and w.is_contiguous() and b.is_contiguous()
    return ln_gluon_kernel[(grid or m,)](x, y, w, b, mean, rstd, m, x.stride(0), y.stride(0), eps,
                                         N=n, NW=warps, NBUF=nbuf, VEC=16 // x.element_size(), num_warps=warps)


def sm_gluon(x, y, warps=32, nbuf=1, grid=None):
    m, n = x.shape
    assert x.stride(1) == 1 and y.stride(1) == 1
    return sm_gluon_kernel[(grid or m,)](x, y, m, x.stride(0), y.stride(0),
                                         N=n, NW=warps, NBUF=nbuf, VEC=16 // x.element_size(), num_warps=warps)


def describe(k):
    """Registers, spills and shared memory of the compiled kernel a launch returned, when it says."""
    try:
        return f"regs {k.n_regs} spills {k.n_spills} smem {k.metadata.shared // 1024}K"
    except Exception:
        return ""


if __name__ == "__main__":
    from gpu_common import load, bench, rel

    T0 = time.time()
    torch.cuda.set_stream(torch.cuda.Stream())
    ln = load("tutorials/02_layer_norm.py")
    sm = load("tutorials/01_fused_softmax.py")
    print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)

    n = 32768
    m = 2 ** 26 // n
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * 3
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    mean = torch.empty(m, device="cuda")
    rstd = torch.empty(m, device="cuda")
    out = torch.empty_like(x)
    copy_ms = bench(lambda: out.copy_(x), graph=False)
    del out
    xd = x.double()
    ln_ref = torch.nn.functional.layer_norm(xd, (n,), w.double(), b.double(), eps=1e-5)
    mean_ref = xd.mean(-1)
    rstd_ref = 1.0 / torch.sqrt(xd.var(-1, unbiased=False) + 1e-5)
    sm_ref = torch.softmax(xd, -1)
    del xd
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy {copy_ms * 1e3:.1f} us, {sms} SMs, t={time.time() - T0:.0f}s", flush=True)

    runs = [("LN page", lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5), "ln"),
            ("softmax page", lambda: sm["softmax_rows_forward"](x, y), "sm")]
    for warps, nbuf, per_sm in [(32, 1, 1), (32, 0, 1), (16, 1, 1), (16, 0, 1)]:
        runs.append((f"LN gluon w{warps} xbuf {nbuf} {per_sm}/SM",
                     lambda warps=warps, nbuf=nbuf, g=per_sm * sms: ln_gluon(x, y, w, b, mean, rstd, 1e-5, warps,
                                                                             nbuf, g), "ln"))
    # 2 programs per SM do not fit: 16 warps take 90 to 128 registers a thread (ptxas, sm_90a, Triton 3.6)
    for warps, nbuf, per_sm in [(32, 1, 1), (32, 2, 1), (32, 3, 1), (32, 0, 1), (16, 1, 1), (16, 2, 1),
                                (16, 3, 1), (16, 0, 1)]:
        runs.append((f"softmax gluon w{warps} xbuf {nbuf} {per_sm}/SM",
                     lambda warps=warps, nbuf=nbuf, g=per_sm * sms: sm_gluon(x, y, warps, nbuf, g), "sm"))
    for name, fn, kind in runs:
        y.fill_(float("nan"))
        mean.fill_(float("nan"))
        rstd.fill_(float("nan"))
        try:
            k = fn()
            torch.cuda.synchronize()
            if kind == "ln":
                err = f"err {rel(y, ln_ref):.1e} mean {rel(mean, mean_ref):.1e} rstd {rel(rstd, rstd_ref):.1e}"
            else:
                err = f"err {rel(y, sm_ref):.1e}"
            pcts = [copy_ms / bench(fn) * 100 for _ in range(3)]
        except Exception as e:
            print(name, "FAILED", type(e).__name__, str(e)[:300], flush=True)
            continue
        print(f"{name:34s} {' '.join(f'{p:5.1f}' for p in pcts)} {err} {describe(k)} t={time.time() - T0:.0f}s",
              flush=True)
