"""Dev only: Inductor-style two-read forwards for wide 16-bit rows. One row per program (grid = rows, no
row loop), small programs so that several share an SM, the row streamed in CHUNK columns twice: the first
read (evict_last) gathers the statistics per lane, the second (backwards, evict_first) writes y with
streaming stores. torch.compile's RMSNorm runs this way at bf16 N = 32768 at 0.99 of the copy
(shared/anchors/h100-peers.md), where the pages' one-read kernels sit at 94-95%.

Layer norm statistics, two ways: STATS=0 sums shifted by the row's first value (the page's chunked kernel);
STATS=1 a Welford mean and M2 per lane, combined across lanes once per row (Chan's formula, tl.reduce).
Softmax: a running (max, sum) per lane with one exp per element (e = exp(-|x - m|)).
num_stages=1, as Inductor launches its reductions (Triton's default of 3 pipelines the chunk loop through
shared memory; that first sweep read 48-91%, all below the pages).

PYTHONUNBUFFERED=1 python3 dev/rowchunk_gpu.py
"""
import time

import torch
import triton
import triton.language as tl
from gpu_common import load, bench, rel

T0 = time.time()
torch.cuda.set_stream(torch.cuda.Stream())
ln = load("tutorials/02_layer_norm.py")
sm = load("tutorials/01_fused_softmax.py")
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)


@triton.jit
def chan(m_a, q_a, n_a, m_b, q_b, n_b):
    n = n_a + n_b
    d = m_b - m_a
    f = tl.where(n > 0, n_b / tl.maximum(n, 1.0), 0.0)
    return m_a + d * f, q_a + q_b + d * d * n_a * f, n


@triton.jit
def ln_rowchunk(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_cols, xs, ys, eps,
                CHUNK: tl.constexpr, STATS: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, CHUNK)
    x_row = x_ptr + tl.cast(row, tl.int64) * xs
    y_row = y_ptr + tl.cast(row, tl.int64) * ys
    n_chunks = tl.cdiv(n_cols, CHUNK)
    if STATS == 0:
        shift = tl.load(x_row).to(tl.float32)
        s1 = tl.zeros([CHUNK], tl.float32)
        s2 = tl.zeros([CHUNK], tl.float32)
        for c in range(0, n_chunks):
            offs = c * CHUNK + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy="evict_last").to(tl.float32)
            d = tl.where(offs < n_cols, x - shift, 0.0)
            s1 += d
            s2 += d * d
        m1 = tl.sum(s1, axis=0) / n_cols
        var = tl.maximum(tl.sum(s2, axis=0) / n_cols - m1 * m1, 0.0)
        mean = shift + m1
    else:
        mu = tl.zeros([CHUNK], tl.float32)
        q = tl.zeros([CHUNK], tl.float32)
        k = tl.zeros([CHUNK], tl.float32)
        for c in range(0, n_chunks):
            offs = c * CHUNK + cols
            ok = offs < n_cols
            x = tl.load(x_row + offs, mask=ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
            k_new = k + ok.to(tl.float32)
            d = x - mu
            mu = tl.where(ok, mu + d / tl.maximum(k_new, 1.0), mu)
            q = tl.where(ok, q + d * (x - mu), q)
            k = k_new
        mean, m2, _ = tl.reduce((mu, q, k), 0, chan)
        var = m2 / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    for c in range(0, n_chunks):
        offs = (n_chunks - 1 - c) * CHUNK + cols
        ok = offs < n_cols
        x = tl.load(x_row + offs, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(w_ptr + offs, mask=ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
        b = tl.load(b_ptr + offs, mask=ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
        tl.store(y_row + offs, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=ok, cache_modifier=".cs")
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def sm_rowchunk(x_ptr, y_ptr, n_cols, xs, ys, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, CHUNK)
    x_row = x_ptr + tl.cast(row, tl.int64) * xs
    y_row = y_ptr + tl.cast(row, tl.int64) * ys
    n_chunks = tl.cdiv(n_cols, CHUNK)
    m = tl.full([CHUNK], -float("inf"), tl.float32)
    s = tl.zeros([CHUNK], tl.float32)
    for c in range(0, n_chunks):
        offs = c * CHUNK + cols
        x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"), eviction_policy="evict_last").to(tl.float32)
        e = tl.exp(-tl.abs(x - m))  # one exp: exp(m - x) if x is the new max, else exp(x - m)
        e = tl.where(x == m, 1.0, e)  # both -inf (or equal): exp(0)
        up = x > m
        s = tl.where(up, s * e + 1.0, s + tl.where(x == -float("inf"), 0.0, e))
        m = tl.maximum(m, x)
    row_max = tl.max(m, axis=0)
    shift = tl.where(row_max == -float("inf"), 0.0, row_max)
    inv = 1.0 / tl.sum(tl.where(m == -float("inf"), 0.0, s * tl.exp(m - shift)), axis=0)
    for c in range(0, n_chunks):
        offs = (n_chunks - 1 - c) * CHUNK + cols
        ok = offs < n_cols
        x = tl.load(x_row + offs, mask=ok, other=-float("inf"), eviction_policy="evict_first").to(tl.float32)
        tl.store(y_row + offs, (tl.exp(x - shift) * inv).to(y_ptr.dtype.element_ty), mask=ok, cache_modifier=".cs")


for dtype, n in [(torch.bfloat16, 32768), (torch.bfloat16, 16384), (torch.float32, 32768)]:
    m = 2 ** 26 // n
    x = torch.randn(m, n, device="cuda", dtype=dtype) * 3 + 1
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    mean = torch.empty(m, device="cuda")
    rstd = torch.empty(m, device="cuda")
    out = torch.empty_like(x)
    ln_ref = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double())
    sm_ref = torch.softmax(x.double(), -1)
    runs = [("LN page", lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5), ln_ref),
            ("softmax page", lambda: sm["softmax_rows_forward"](x, y), sm_ref)]
    for chunk in (2048, 4096, 8192, 16384):
        for warps in (2, 4, 8, 16):
            per_thread = chunk // (32 * warps)
            if not 8 <= per_thread <= 32:
                continue
            for stats in (0, 1):
                runs.append((f"LN rowchunk {chunk} w{warps} stats{stats}",
                             lambda c=chunk, wp=warps, st=stats: ln_rowchunk[(m,)](
                                 x, y, w, b, mean, rstd, n, x.stride(0), y.stride(0), 1e-5, CHUNK=c, STATS=st,
                                 num_warps=wp, num_stages=1), ln_ref))
            runs.append((f"softmax rowchunk {chunk} w{warps}",
                         lambda c=chunk, wp=warps: sm_rowchunk[(m,)](x, y, n, x.stride(0), y.stride(0), CHUNK=c,
                                                                     num_warps=wp, num_stages=1), sm_ref))
    copy_ms = bench(lambda: out.copy_(x), graph=False)
    print(f"== {dtype} N={n}: copy {2 * x.numel() * x.element_size() / copy_ms * 1e-6:.0f} GB/s", flush=True)
    for name, fn, ref in runs:
        y.fill_(float("nan"))
        try:
            k = fn()
            torch.cuda.synchronize()
            err = rel(y, ref)
            pcts = [copy_ms / bench(fn) * 100 for _ in range(2)]
        except Exception as e:
            print(name, "FAILED", type(e).__name__, str(e)[:200], flush=True)
            continue
        regs = f"regs {k.n_regs} spills {k.n_spills}" if hasattr(k, "n_regs") else ""
        print(f"{name:34s} {' '.join(f'{p:5.1f}' for p in pcts)} err {err:.1e} {regs} t={time.time() - T0:.0f}s",
              flush=True)
    del x, y, out, ln_ref, sm_ref
    torch.cuda.empty_cache()
