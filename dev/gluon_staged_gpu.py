"""Dev only: bf16 rows of 32768 columns (2048 rows), layer-norm and softmax forwards that stage each row in
shared memory (Gluon) instead of registers. A 64 KB row held in registers as fp32 takes half an SM's
register file, so one program per SM is all that fits and its load, reductions and store cannot overlap
another row's (the pages read ~94% of the copy there, against 98-99% at 16384 where two rows fit). Here
one program per row copies its row global -> shared (cp.async, in GROUPS commit groups), then makes three
passes over shared memory in CH-column chunks (LN: sum, squared deviations, y; softmax: max, sum of exp,
y), so a program needs few registers and 64 KB of shared memory: three programs, three rows, per SM.
Each thread reads back only the elements its own cp.async wrote (same layout), so waits need no barrier.

Kernel-only, CUDA-graph timed like the pages, % of an eager copy, checked against float64.

PYTHONUNBUFFERED=1 python3 dev/gluon_staged_gpu.py
"""
import time

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp

async_load = getattr(cp, "async_load", None) or cp.async_copy_global_to_shared  # 3.6 name / 3.9 name


@gluon.jit
def ln_staged_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, xs, ys, eps,
                     N: gl.constexpr, CH: gl.constexpr, NW: gl.constexpr, VEC: gl.constexpr,
                     GROUPS: gl.constexpr, UNROLL: gl.constexpr, P3: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([VEC], [32], [NW], [0])
    S: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    NCH: gl.constexpr = N // CH
    PER: gl.constexpr = NCH // GROUPS
    row = gl.program_id(0).to(gl.int64)
    cols = gl.arange(0, CH, layout=L)
    x_s = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [NCH, CH], S)
    for i in gl.static_range(NCH):
        async_load(x_s.index(i), x_ptr + row * xs + i * CH + cols)
        if (i + 1) % PER == 0:
            cp.commit_group()
    acc = gl.zeros([CH], gl.float32, L)
    for g in gl.static_range(GROUPS):
        cp.wait_group(GROUPS - 1 - g)
        if UNROLL:
            for j in gl.static_range(PER):
                acc += x_s.index(g * PER + j).load(L).to(gl.float32)
        else:
            for j in range(PER):
                acc += x_s.index(g * PER + j).load(L).to(gl.float32)
    mean = gl.sum(acc, axis=0) / N
    acc = gl.zeros([CH], gl.float32, L)
    for i in range(NCH):
        d = x_s.index(i).load(L).to(gl.float32) - mean
        acc += d * d
    rstd = 1.0 / gl.sqrt(gl.sum(acc, axis=0) / N + eps)
    if P3 == 1:  # unrolled: ptxas hoists as many w, b loads as its registers allow
        for i in gl.static_range(NCH):
            w = gl.load(w_ptr + i * CH + cols).to(gl.float32)
            b = gl.load(b_ptr + i * CH + cols).to(gl.float32)
            y = (x_s.index(i).load(L).to(gl.float32) - mean) * rstd * w + b
            gl.store(y_ptr + row * ys + i * CH + cols, y.to(y_ptr.dtype.element_ty))
    elif P3 == 2:  # the next chunk's w, b loaded while this chunk is computed
        w_n = gl.load(w_ptr + cols)
        b_n = gl.load(b_ptr + cols)
        for i in range(NCH):
            w = w_n.to(gl.float32)
            b = b_n.to(gl.float32)
            nxt = (i + 1) % NCH
            w_n = gl.load(w_ptr + nxt * CH + cols)
            b_n = gl.load(b_ptr + nxt * CH + cols)
            y = (x_s.index(i).load(L).to(gl.float32) - mean) * rstd * w + b
            gl.store(y_ptr + row * ys + i * CH + cols, y.to(y_ptr.dtype.element_ty))
    else:
        for i in range(NCH):
            w = gl.load(w_ptr + i * CH + cols).to(gl.float32)
            b = gl.load(b_ptr + i * CH + cols).to(gl.float32)
            y = (x_s.index(i).load(L).to(gl.float32) - mean) * rstd * w + b
            gl.store(y_ptr + row * ys + i * CH + cols, y.to(y_ptr.dtype.element_ty))
    gl.store(mean_ptr + row, mean)
    gl.store(rstd_ptr + row, rstd)


@gluon.jit
def sm_staged_kernel(x_ptr, y_ptr, xs, ys,
                     N: gl.constexpr, CH: gl.constexpr, NW: gl.constexpr, VEC: gl.constexpr,
                     GROUPS: gl.constexpr, UNROLL: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([VEC], [32], [NW], [0])
    S: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    NCH: gl.constexpr = N // CH
    PER: gl.constexpr = NCH // GROUPS
    row = gl.program_id(0).to(gl.int64)
    cols = gl.arange(0, CH, layout=L)
    x_s = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [NCH, CH], S)
    for i in gl.static_range(NCH):
        async_load(x_s.index(i), x_ptr + row * xs + i * CH + cols)
        if (i + 1) % PER == 0:
            cp.commit_group()
    acc = gl.full([CH], -float("inf"), gl.float32, L)
    for g in gl.static_range(GROUPS):
        cp.wait_group(GROUPS - 1 - g)
        if UNROLL:
            for j in gl.static_range(PER):
                acc = gl.maximum(acc, x_s.index(g * PER + j).load(L).to(gl.float32))
        else:
            for j in range(PER):
                acc = gl.maximum(acc, x_s.index(g * PER + j).load(L).to(gl.float32))
    row_max = gl.max(acc, axis=0)
    acc = gl.zeros([CH], gl.float32, L)
    for i in range(NCH):
        acc += gl.exp(x_s.index(i).load(L).to(gl.float32) - row_max)
    inv = 1.0 / gl.sum(acc, axis=0)
    for i in range(NCH):
        y = gl.exp(x_s.index(i).load(L).to(gl.float32) - row_max) * inv
        gl.store(y_ptr + row * ys + i * CH + cols, y.to(y_ptr.dtype.element_ty))


def ln_staged(x, y, w, b, mean, rstd, eps, warps=8, rep=1, groups=1, unroll=False, maxnreg=None, p3=0):
    m, n = x.shape
    vec = 16 // x.element_size()
    return ln_staged_kernel[(m,)](x, y, w, b, mean, rstd, x.stride(0), y.stride(0), eps, N=n,
                                  CH=vec * 32 * warps * rep, NW=warps, VEC=vec, GROUPS=groups, UNROLL=unroll, P3=p3, num_warps=warps, **opts(maxnreg))


def sm_staged(x, y, warps=8, rep=1, groups=1, unroll=False, maxnreg=None):
    m, n = x.shape
    vec = 16 // x.element_size()
    return sm_staged_kernel[(m,)](x, y, x.stride(0), y.stride(0), N=n, CH=vec * 32 * warps * rep, NW=warps,
                                  VEC=vec, GROUPS=groups, UNROLL=unroll, num_warps=warps, **opts(maxnreg))


def opts(maxnreg):
    return {} if maxnreg is None else {"maxnreg": maxnreg}


def describe(k):
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
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * 3 + 1
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    mean = torch.empty(m, device="cuda")
    rstd = torch.empty(m, device="cuda")
    out = torch.empty_like(x)
    xd = x.double()
    ln_ref = torch.nn.functional.layer_norm(xd, (n,), w.double(), b.double(), eps=1e-5)
    mean_ref = xd.mean(-1)
    rstd_ref = 1.0 / torch.sqrt(xd.var(-1, unbiased=False) + 1e-5)
    sm_ref = torch.softmax(xd, -1)
    del xd
    runs = [("LN page", lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5), "ln"),
            ("softmax page", lambda: sm["softmax_rows_forward"](x, y), "sm")]
    # (warps, rep, groups, unroll pass 1, maxnreg, LN pass 3: 0 loop, 1 unrolled, 2 next w, b prefetched)
    for cfg in [(8, 2, 4), (8, 2, 4, False, None, 2), (8, 4, 4), (8, 4, 4, False, None, 2), (8, 1, 4, False, 80, 1),
                (8, 2, 4, False, 80, 1), (16, 1, 4, False, 40, 1), (16, 1, 4, False, None, 2), (16, 2, 4, False, 40),
                (16, 2, 4, False, 40, 2), (16, 2, 4, False, None, 2), (16, 1, 4, True, 40)]:
        runs.append((f"LN staged {cfg}", lambda a=cfg: ln_staged(x, y, w, b, mean, rstd, 1e-5, *a), "ln"))
    for cfg in [(8, 1, 4), (8, 2, 4), (16, 1, 4), (16, 1, 4, True, 40)]:
        runs.append((f"softmax staged {cfg}", lambda a=cfg: sm_staged(x, y, *a), "sm"))
    results = {}
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
        except Exception as e:
            print(name, "FAILED", type(e).__name__, str(e)[:400], flush=True)
            continue
        results[name] = (fn, err, describe(k))
    for rnd in range(3):
        copy_ms = bench(lambda: out.copy_(x), graph=False)
        print(f"round {rnd}: copy {2 * x.numel() * 2 / copy_ms * 1e-6:.0f} GB/s t={time.time() - T0:.0f}s", flush=True)
        for name, (fn, err, desc) in results.items():
            print(f"  {name:34s} {copy_ms / bench(fn) * 100:5.1f}  {err} {desc}", flush=True)
