"""02 backward bf16/fp32 at 512..8192: the page kernel with sum configs, 32 warps, and a num_stages-pipelined variant."""
import sys, itertools, time
sys.path.insert(0, "tests")
from conftest import untimed_source
import torch, triton, triton.language as tl
src = open("tutorials/02_layer_norm.py").read()
g = {"__name__": "probe02", "__file__": "tutorials/02_layer_norm.py"}
exec(compile(untimed_source(src), "tutorials/02_layer_norm.py", "exec"), g)
torch.cuda.set_stream(torch.cuda.Stream())

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

def bench(fn, graph=True):
    fn(); torch.cuda.synchronize()
    if graph:
        with torch.cuda.graph(c := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream()):
            fn()
        fn = c.replay
    return triton.testing.do_bench(fn, warmup=5, rep=30, return_mode="median")
SUM = g["sum_partials_kernel"]
def sums(meta):
    return lambda dwp, dbp, dw, db, lines, n: SUM[(triton.cdiv(n, meta["BLOCK_C"]),)](dwp, dbp, dw, db, lines, n, **meta)
SUMS = {"P64C16": dict(BLOCK_P=64, BLOCK_C=16, num_warps=4), "P128C16w8": dict(BLOCK_P=128, BLOCK_C=16, num_warps=8),
        "P256C8w8": dict(BLOCK_P=256, BLOCK_C=8, num_warps=8), "P32C16w2": dict(BLOCK_P=32, BLOCK_C=16, num_warps=2),
        "P64C8w2": dict(BLOCK_P=64, BLOCK_C=8, num_warps=2)}
t0 = time.time()
for dtype, n in itertools.product((torch.bfloat16, torch.float32), (512, 2048, 8192)):
    m = 2**26 // n
    x = torch.randn(m, n, device="cuda", dtype=dtype); w = torch.randn(n, device="cuda", dtype=dtype)
    dy = torch.randn_like(x); dx = torch.empty_like(x); mean = x.float().mean(1); rstd = 1 / x.float().std(1)
    dw = torch.empty(n, device="cuda", dtype=dtype); db = torch.empty_like(dw)
    nbytes = x.numel() * x.element_size()
    light = 2 * nbytes / bench(lambda: dx.copy_(x), graph=False) * 1e-6
    pct = lambda ms: f"{100 * 3 * nbytes / ms * 1e-6 / light:5.1f}"
    out = [f"{str(dtype)[6:]:8s} {n:5d}"]
    g["SUM_META"] = dict(BLOCK_P=32, BLOCK_C=128, num_warps=4)
    out.append("page " + pct(bench(lambda: g["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db))))
    for name, meta in SUMS.items():
        g["SUM_META"] = meta
        out.append(f"{name} " + pct(bench(lambda: g["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db))))
    g["SUM_META"] = SUMS["P64C16"]
    # kernel variants with the P64C16 sum
    kernel, meta, lines, rpp = g["_bwd_config"](m, n, x.element_size(), lambda k, mm: 1)
    ref = (dx.clone(), dw.clone(), db.clone())
    for warps in sorted({meta["num_warps"], 32, max(4, meta["num_warps"] // 2)}):
        for stages in (0, 2, 3):
            mm = dict(meta, num_warps=warps)
            try:
                for lines in (g["NUM_SMS"], 2 * g["NUM_SMS"]):
                    dwp = torch.empty(lines, n, device="cuda"); dbp = torch.empty_like(dwp)
                    if stages == 0:
                        k = lambda: g["layer_norm_bwd_kernel"][(lines,)](x, dy, dx, w, mean, rstd, dwp, dbp, m, n, n, n, n, HAS_W=True, COMPUTE_DWDB=True, **mm)
                    else:
                        k = lambda: bwd_staged[(lines,)](x, dy, dx, w, mean, rstd, dwp, dbp, m, n, n, n, n, HAS_W=True, COMPUTE_DWDB=True, STAGES=stages, **mm)
                    s = lambda: SUM[(triton.cdiv(n, 16),)](dwp, dbp, dw, db, lines, n, **SUMS["P64C16"])
                    both = lambda: (k(), s())
                    both(); torch.cuda.synchronize()
                    bad = max((dx.float() - ref[0].float()).abs().max().item(), (dw.float() - ref[1].float()).abs().max().item() / max(1, ref[1].float().abs().max().item()))
                    out.append(f"w{warps}s{stages}L{lines // g['NUM_SMS']} {pct(bench(k))}/{pct(bench(both))}{' BAD %.0e' % bad if bad > 0.05 else ''}")
            except Exception as e:
                out.append(f"w{warps}s{stages} fail {type(e).__name__}")
    c = g["layer_norm_bwd_kernel"].warmup(x, dy, dx, w, mean, rstd, dwp, dbp, m, n, n, n, n, HAS_W=True, COMPUTE_DWDB=True, grid=(1,), **meta); c._init_handles()
    print(" | ".join(out), f"| page meta {meta} regs {c.n_regs} spills {c.n_spills}", flush=True)
print(f"02 probe {time.time() - t0:.0f} s")
