"""Cross-entropy forward alone (no gradient), bf16: variants of the row-statistics loop, beside 06's kernel and a copy.
A: 06's cross_entropy_kernel, WRITE_GRAD=False (per-chunk tl.max across the whole program: a barrier a chunk).
B: each warp owns a contiguous segment of every chunk ([W, CHUNK // W] tile): running max and sum per warp, reduced
   within the warp (shuffles, no barrier) each chunk, across warps once a row; exp2 with the log2(e) scale in one FMA.
C: B with the per-lane online update (no per-chunk reduction at all; one exp a logit via exp(-|x - m|)).
python3 ce_fwd.py [cpu]  (cpu: interpreter, small shapes, checks against float64)"""
import os, sys, time
CPU = len(sys.argv) > 1 and sys.argv[1] == "cpu"
if CPU:
    os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl
import torch.nn.functional as F
LOG2E = tl.constexpr(1.4426950408889634)

@triton.jit
def fwd_warp_segments(x_ptr, target_ptr, loss_ptr, n_rows, n_cols, stride, ignore_index,
                      W: tl.constexpr, SEG: tl.constexpr, ONLINE: tl.constexpr, NS: tl.constexpr):
    # a chunk is a [W, SEG] tile, SEG = 32 threads x 16 bytes: one warp spans a tile row, so Triton lays the warps
    # along the rows and tl.max(axis=1) stays inside a warp (shuffles, no barrier); W = rows of the tile, a multiple
    # of num_warps (each warp holds W / num_warps of them)
    seg = tl.arange(0, W)[:, None] * SEG + tl.arange(0, SEG)[None, :]
    CHUNK: tl.constexpr = W * SEG
    n_chunks = tl.cdiv(n_cols, CHUNK)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        base = x_ptr + tl.cast(row, tl.int64) * stride
        target = tl.load(target_ptr + row)
        if ONLINE:
            m = tl.full([W, SEG], -float("inf"), tl.float32)
            s = tl.zeros([W, SEG], tl.float32)
        else:
            m = tl.full([W], -float("inf"), tl.float32)
            s = tl.zeros([W], tl.float32)
        for c in tl.range(0, n_chunks, num_stages=NS):  # NS 1: loads straight to registers, no SMEM, no barrier
            offs = c * CHUNK + seg
            x = tl.load(base + offs, mask=offs < n_cols, other=-float("inf")).to(tl.float32) * LOG2E
            if ONLINE:
                hi = tl.maximum(m, x)
                e = tl.exp2(tl.minimum(m, x) - tl.where(hi == -float("inf"), 0.0, hi))
                s = tl.where(x > m, s * e + 1.0, s + tl.where(x == -float("inf"), 0.0, e))
                m = hi
            else:
                m_new = tl.maximum(m, tl.max(x, axis=1))
                shift = tl.where(m_new == -float("inf"), 0.0, m_new)
                s = s * tl.exp2(m - shift) + tl.sum(tl.exp2(x - shift[:, None]), axis=1)
                m = m_new
        if ONLINE:
            m_row = tl.max(tl.max(m, axis=1), axis=0)
            shift = tl.where(m_row == -float("inf"), 0.0, m_row)
            total = tl.sum(tl.sum(s * tl.exp2(m - shift), axis=1), axis=0)
        else:
            m_row = tl.max(m, axis=0)
            shift = tl.where(m_row == -float("inf"), 0.0, m_row)
            total = tl.sum(s * tl.exp2(m - shift), axis=0)
        lse = (shift + tl.log2(total)) / LOG2E
        t = tl.minimum(tl.maximum(target, 0), n_cols - 1)
        x_t = tl.load(base + t).to(tl.float32)
        tl.store(loss_ptr + row, tl.where(target == ignore_index, 0.0, lse - x_t))

def run_b(x, t, losses, W, warps, online, per_sm, num_sms, ns=3):
    grid, seg = min(x.shape[0], per_sm * num_sms), 32 * 16 // x.element_size()
    fwd_warp_segments[(grid,)](x, t, losses, x.shape[0], x.shape[1], x.stride(0), -100, W=W, SEG=seg, ONLINE=online,
                               NS=ns, num_warps=warps)

if CPU:
    for V in (300, 1000, 4099):
        x = (3 * torch.randn(7, V)).to(torch.bfloat16); t = torch.randint(0, V, (7,)); t[2] = -100
        ref = F.cross_entropy(x.double(), t, reduction="none")
        for W, warps, online in ((16, 4, False), (8, 8, False), (16, 4, True)):
            losses = torch.empty(7)
            run_b(x, t, losses, W, warps, online, 1, 2)
            print(V, W, warps, online, (losses.double() - ref).abs().max().item())
    sys.exit()

sys.path.insert(0, "tests")
from conftest import untimed_source
path = "tutorials/06_cross_entropy.py"
g = {"__name__": "probe06", "__file__": path}
exec(compile(untimed_source(open(path).read()), path, "exec"), g)
src06 = open(path).read()
open("/tmp/read06.py", "w").write("import triton\nimport triton.language as tl\n" + src06[src06.index("@triton.jit\ndef read_kernel"):src06.index("def light_gbs")])
import importlib.util
_spec = importlib.util.spec_from_file_location("read06", "/tmp/read06.py"); _m = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(_m)
read_kernel = _m.read_kernel
torch.cuda.set_stream(torch.cuda.Stream())
def bench(fn):
    fn(); torch.cuda.synchronize()
    with torch.cuda.graph(c := torch.cuda.CUDAGraph(), stream=torch.cuda.current_stream()):
        fn()
    return triton.testing.do_bench(c.replay, warmup=5, rep=25, return_mode="median")
NUM_SMS = g["NUM_SMS"]
t0 = time.time()
DT = {"bf16": torch.bfloat16, "fp32": torch.float32}
for dtype in [DT[d] for d in os.environ.get("DTYPES", "bf16,fp32").split(",")]:
    for V in [int(v) for v in os.environ.get("VS", "32000,50304,128256,151936,262144").split(",")]:
        x = torch.randn(2**30 // (V * (2 if dtype == torch.float32 else 1)), V, device="cuda", dtype=dtype)
        t = torch.randint(0, V, (x.shape[0],), device="cuda"); out = torch.empty_like(x)
        losses = torch.empty(x.shape[0], device="cuda")
        nbytes = x.numel() * x.element_size()
        light = max(2 * nbytes / triton.testing.do_bench(lambda: out.copy_(x), warmup=5, rep=25) * 1e-6 for _ in range(2))
        read = max(nbytes / triton.testing.do_bench(lambda: x.sum(), warmup=5, rep=25) * 1e-6 for _ in range(2))
        words = x.view(-1).view(torch.int32); outw = torch.empty(triton.cdiv(words.numel(), 8192), device="cuda", dtype=torch.int32)
        rpass = max(nbytes / bench(lambda: read_kernel[(outw.numel(),)](words, outw, words.numel(), BLOCK=8192, num_warps=16)) * 1e-6 for _ in range(2))
        pct = lambda f: 100 * nbytes / bench(f) * 1e-6 / light
        ref = F.cross_entropy(x[:64].float(), t[:64], reduction="none")
        line = f"{str(dtype)[6:]:8s} V {V:6d} copy {light:.0f} GB/s, read pass {rpass:.0f} GB/s = {100 * rpass / light:.1f}% of copy (% below: of the copy), x.sum {100 * read / light:.1f}% | page {pct(lambda: g['cross_entropy_rows'](x, t, None, -100, 0.0, True, None)):.1f}"
        for chunk, per_sm, stages in ((4096, 8, 3), (4096, 8, 1), (8192, 4, 3), (2048, 16, 1), (2048, 16, 3)):
            try:  # the page's kernel, launched with more bytes in flight an SM (chunk x programs)
                meta, grid = g["_config"](x.shape[0], V, x.element_size(), 2, chunk, stages, per_sm, grad=False)
                consts = torch.tensor([1.0, float(V)], device="cuda")
                f = lambda: g["cross_entropy_kernel"][(grid,)](x, t, x, consts, losses, x, x.shape[0], V, x.stride(0),
                    x.stride(0), -100, 0.0, HAS_WEIGHT=False, SMOOTH=False, WRITE_GRAD=False, **meta)
                f(); torch.cuda.synchronize()
                err = (losses[:64] - ref).abs().max().item()
                line += f" | A c{chunk} x{per_sm} s{stages} w{meta['num_warps']} {pct(f):.1f}{' ERR %.1e' % err if err > 2e-2 else ''}"
            except Exception as e:
                line += f" | A c{chunk} x{per_sm} {type(e).__name__}"
        for W, warps, online, per_sm, ns in ((16, 4, False, 4, 3), (16, 4, False, 4, 1), (32, 4, False, 4, 1),
                                             (32, 8, False, 2, 3), (32, 8, False, 4, 1), (8, 4, False, 8, 1),
                                             (16, 4, True, 4, 1), (32, 8, True, 2, 3)):
            try:
                f = lambda: run_b(x, t, losses, W, warps, online, per_sm, NUM_SMS, ns)
                f(); torch.cuda.synchronize()
                err = (losses[:64] - ref).abs().max().item()
                line += f" | {'C' if online else 'B'} r{W} w{warps} x{per_sm} s{ns} {pct(f):.1f}{' ERR %.1e' % err if err > 2e-2 else ''}"
            except Exception as e:
                line += f" | r{W} w{warps} {type(e).__name__}"
        print(line, flush=True)
        del x, out
        torch.cuda.empty_cache()
print(f"total {time.time() - t0:.0f} s")
