"""Dev only: why the layer-norm page's staged forward (masked, n_cols at run time) read 93.5% of the copy
at bf16 2048 x 32768 where dev/gluon_staged_gpu.py's unmasked kernel with N fixed read 97.1. Variants of
the page's kernel: MASK 0 no masks at all (the row a whole number of chunks), 1 masks on the copies and
the stores only, 2 as the page (also where() in the passes, masked w and b); WB_FIRST loads w and b
before the chunk of x in pass 3; NCONST passes the row length as a constexpr. Kernel-only, graph-timed.

PYTHONUNBUFFERED=1 python3 dev/ln_staged_variants_gpu.py
"""
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from gpu_common import load, bench, rel

async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared


@gluon.jit
def ln_var_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_cols_rt, x_row_stride, y_row_stride, eps,
                  CHUNKS: gl.constexpr, VEC: gl.constexpr, REP: gl.constexpr, MASK: gl.constexpr,
                  WB_FIRST: gl.constexpr, NCONST: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])
    CHUNK: gl.constexpr = VEC * 32 * gl.num_warps() * REP
    if NCONST:
        n_cols = CHUNKS * CHUNK
    else:
        n_cols = n_cols_rt
    row = gl.program_id(0).to(gl.int64)
    cols = gl.arange(0, CHUNK, layout=layout)
    x_row = x_ptr + row * x_row_stride
    x_smem = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [CHUNKS, CHUNK], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    for c in gl.static_range(CHUNKS):
        if MASK >= 1:
            async_load(x_smem.index(c), x_row + c * CHUNK + cols, mask=c * CHUNK + cols < n_cols)
        else:
            async_load(x_smem.index(c), x_row + c * CHUNK + cols)
        async_copy.commit_group()
    acc = gl.zeros([CHUNK], gl.float32, layout)
    for c in gl.static_range(CHUNKS):
        async_copy.wait_group(CHUNKS - 1 - c)
        x = x_smem.index(c).load(layout).to(gl.float32)
        if MASK >= 2:
            x = gl.where(c * CHUNK + cols < n_cols, x, 0.0)
        acc += x
    mean = gl.sum(acc, axis=0) / n_cols
    acc = gl.zeros([CHUNK], gl.float32, layout)
    for c in range(CHUNKS):
        xc = x_smem.index(c).load(layout).to(gl.float32) - mean
        if MASK >= 2:
            xc = gl.where(c * CHUNK + cols < n_cols, xc, 0.0)
        acc += xc * xc
    rstd = 1.0 / gl.sqrt(gl.sum(acc, axis=0) / n_cols + eps)
    y_row = y_ptr + row * y_row_stride
    for c in range(CHUNKS):
        col_ok = c * CHUNK + cols < n_cols
        if WB_FIRST:
            if MASK >= 2:
                w = gl.load(w_ptr + c * CHUNK + cols, mask=col_ok, other=0.0).to(gl.float32)
                b = gl.load(b_ptr + c * CHUNK + cols, mask=col_ok, other=0.0).to(gl.float32)
            else:
                w = gl.load(w_ptr + c * CHUNK + cols).to(gl.float32)
                b = gl.load(b_ptr + c * CHUNK + cols).to(gl.float32)
            y = (x_smem.index(c).load(layout).to(gl.float32) - mean) * rstd * w + b
        else:
            y = (x_smem.index(c).load(layout).to(gl.float32) - mean) * rstd
            if MASK >= 2:
                y = y * gl.load(w_ptr + c * CHUNK + cols, mask=col_ok, other=0.0).to(gl.float32)
                y = y + gl.load(b_ptr + c * CHUNK + cols, mask=col_ok, other=0.0).to(gl.float32)
            else:
                y = y * gl.load(w_ptr + c * CHUNK + cols).to(gl.float32)
                y = y + gl.load(b_ptr + c * CHUNK + cols).to(gl.float32)
        if MASK >= 1:
            gl.store(y_row + c * CHUNK + cols, y.to(y_ptr.dtype.element_ty), mask=col_ok)
        else:
            gl.store(y_row + c * CHUNK + cols, y.to(y_ptr.dtype.element_ty))
    gl.store(mean_ptr + row, mean)
    gl.store(rstd_ptr + row, rstd)


if __name__ == "__main__":
    torch.cuda.set_stream(torch.cuda.Stream())
    ln = load("tutorials/02_layer_norm.py")
    sm = load("tutorials/01_fused_softmax.py")
    print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)
    n = 32768
    m = 2 ** 26 // n
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * 3 + 1
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y, out = torch.empty_like(x), torch.empty_like(x)
    mean = torch.empty(m, device="cuda")
    rstd = torch.empty(m, device="cuda")
    ref = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), eps=1e-5)
    runs = {"page": lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5),
            "page without staging": lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5, staged={}),
            "softmax page": lambda: sm["softmax_rows_forward"](x, y)}
    for warps, rep, cap in [(16, 2, 40), (8, 4, 80), (16, 1, 40)]:
        for mask, wb_first, nconst in [(2, 0, 0), (1, 0, 0), (0, 0, 0), (2, 1, 0), (0, 1, 0), (2, 0, 1), (0, 1, 1)]:
            meta = dict(CHUNKS=n // (8 * 32 * warps * rep), VEC=8, REP=rep, MASK=mask, WB_FIRST=wb_first,
                        NCONST=nconst, num_warps=warps, maxnreg=cap)
            runs[f"w{warps} rep{rep} cap{cap} mask{mask} wb_first{wb_first} nconst{nconst}"] = (
                lambda meta=meta: ln_var_kernel[(m,)](x, y, w, b, mean, rstd, n, x.stride(0), y.stride(0), 1e-5, **meta))
    info = {}
    for name, fn in runs.items():
        y.fill_(float("nan"))
        k = fn()
        torch.cuda.synchronize()
        err = rel(y, ref) if "softmax" not in name else 0.0
        try:
            info[name] = f"err {err:.1e} regs {k.n_regs} spills {k.n_spills}"
        except AttributeError:
            info[name] = f"err {err:.1e}"
    for rnd in range(2):
        copy_ms = bench(lambda: out.copy_(x), graph=False)
        print(f"round {rnd}: copy {2 * x.numel() * 2 / copy_ms * 1e-6:.0f} GB/s", flush=True)
        for name, fn in runs.items():
            print(f"  {name:44s} {copy_ms / bench(fn) * 100:5.1f}  {info[name]}", flush=True)
