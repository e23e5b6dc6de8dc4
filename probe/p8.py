# 06's loss alone: the page's launch against wider programs, fewer registers (maxnreg), and a loop whose full chunks
# load unmasked (the tail alone masked), bf16 and fp32 at every V, % of the page's read pass (its light), graphed.
# GPU: python3 probe/p8.py > $OUT/p8.log; CPU smoke test: TRITON_INTERPRET=1 python3 probe/p8.py --cpu
import pathlib, sys, time
CPU = "--cpu" in sys.argv
import torch, triton
import triton.language as tl

ROOT, T0, DEV = pathlib.Path(__file__).resolve().parents[1], time.time(), "cpu" if CPU else "cuda"

def page(stem):
    path = next(ROOT.glob(f"tutorials/**/{stem}.py"))
    src = path.read_text()
    src = src[: src.find("\ndef check_row(")]
    ns = {"__name__": "page"}
    exec(compile(src, str(path), "exec"), ns)
    return ns

def line(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)

@triton.jit
def lse_split(x_row, n_cols, CHUNK: tl.constexpr, STAGES: tl.constexpr, KEEP: tl.constexpr):
    LOG2E: tl.constexpr = 1.4426950408889634
    cols = tl.arange(0, CHUNK)
    m, s = tl.full([], -float("inf"), tl.float32), tl.zeros([CHUNK], tl.float32)
    n_full = n_cols // CHUNK
    for chunk in tl.range(0, n_full, num_stages=STAGES):
        x = tl.load(x_row + chunk * CHUNK + cols, eviction_policy=KEEP).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        shift = tl.where(m_new == -float("inf"), 0.0, m_new)
        s, m = s * tl.exp2((m - shift) * LOG2E) + tl.exp2((x - shift) * LOG2E), m_new
    offs = n_full * CHUNK + cols
    x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"), eviction_policy=KEEP).to(tl.float32)
    m_new = tl.maximum(m, tl.max(x, axis=0))
    shift = tl.where(m_new == -float("inf"), 0.0, m_new)
    s, m = s * tl.exp2((m - shift) * LOG2E) + tl.exp2((x - shift) * LOG2E), m_new
    return m, tl.log(tl.sum(s, axis=0))

@triton.jit
def loss_split_kernel(x_ptr, target_ptr, loss_ptr, n_rows, n_cols, x_row_stride, CHUNK: tl.constexpr,
                      STAGES: tl.constexpr):
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride
        x_t = tl.load(x_row + tl.load(target_ptr + row)).to(tl.float32)
        m, log_s = lse_split(x_row, n_cols, CHUNK, STAGES, "evict_last")
        tl.store(loss_ptr + row, m - x_t + log_s)

ns = page("06_cross_entropy")
if "--ncu" in sys.argv:  # under ncu: the page's kernel and the split loop at bf16 32000 and fp32 50304, once each
    for dtype, v in ((torch.bfloat16, 32000), (torch.float32, 50304)):
        m = (2**30 if dtype == torch.bfloat16 else 2**29) // v
        x = torch.randn(m, v, device=DEV, dtype=dtype); target = torch.randint(0, v, (m,), device=DEV)
        loss = torch.empty(m, device=DEV)
        meta, grid = ns["loss_config"](m, v, x.element_size())
        for kern in (ns["loss_kernel"], loss_split_kernel):
            kern[(grid,)](x, target, loss, m, v, x.stride(0), **meta)
        torch.cuda.synchronize()
    sys.exit()
k, sms, bench, light_gbs = ns["loss_kernel"], ns["NUM_SMS"], ns["bench"], ns["light_gbs"]
if not CPU:
    torch.cuda.set_stream(torch.cuda.Stream())  # the page's graphs are captured on a stream of its own
VS = [1000, 1500] if CPU else [32000, 50304, 128256, 151936, 262144]
for dtype in (torch.bfloat16, torch.float32):
    for v in VS:
        m = 8 if CPU else (2**30 if dtype == torch.bfloat16 else 2**29) // v
        x = torch.randn(m, v, device=DEV, dtype=dtype); target = torch.randint(0, v, (m,), device=DEV)
        loss, ref = torch.empty(m, device=DEV), torch.nn.functional.cross_entropy(x.float(), target, reduction="none")
        meta, grid = ns["loss_config"](m, v, x.element_size())
        light = 1.0 if CPU else light_gbs(x, read_only=True)
        cands = [("page", k, meta, grid), ("page split", loss_split_kernel, meta, grid)]
        for chunk, warps, stages, per_sm, reg in [(1024, 2, 3, 32, 32), (1024, 2, 2, 32, 32), (1024, 2, 3, 16, 0),
                                                  (2048, 4, 3, 4, 0), (2048, 4, 3, 8, 0), (2048, 4, 2, 16, 32),
                                                  (1024, 4, 3, 8, 0), (4096, 4, 2, 4, 0), (512, 1, 3, 32, 0)]:
            mt = dict(CHUNK=chunk, num_warps=warps, STAGES=stages) | (dict(maxnreg=reg) if reg else {})
            name = f"{chunk} {warps}w S{stages} {per_sm}/SM" + (f" r{reg}" if reg else "")
            cands += [(name, k, mt, min(m, per_sm * sms)), (name + " split", loss_split_kernel, mt, min(m, per_sm * sms))]
        res = {}
        for name, kern, mt, g in cands:
            fn = lambda: kern[(g,)](x, target, loss, m, v, x.stride(0), **mt)
            try:
                loss.fill_(float("nan")); fn()
                assert torch.allclose(loss, ref, rtol=1e-3, atol=1e-3), name
                res[name] = bench(fn) if not CPU else 1.0
            except Exception as e:
                line(f"   {name}: {type(e).__name__} {str(e)[:80]}")
        nb = x.numel() * x.element_size()
        line(f"ce_fwd {str(dtype)[6:]} V={v}: light {light:.0f} GB/s; page {meta} grid {grid}")
        for name, ms in sorted(res.items(), key=lambda kv: kv[1]):
            line(f"   {name:32s} {ms * 1e3:8.1f} us {res['page'] / ms:.3f}x the page; {100 * nb / ms * 1e-6 / light:.1f}% of light")
        del x
line("done")
