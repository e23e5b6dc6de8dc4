"""06 split in three pages: the kernels before and after, timed on a GPU with the pages' own launch configs.

Run from the repository root on a GPU machine: ``python probe/ce_short.py`` (writes $OUT/ce_short.jsonl, or
/tmp/ce_short.jsonl, and prints a table). Sizes are the pages' benchmark sizes (2**30 bf16 / 2**29 fp32 logits);
V = 32000, 50304, 128256, 151936, 262144; every variant on the same tensors; triton.testing.do_bench median of CUDA
graph replays (as the pages time them). GB/s counts the bytes a perfect kernel moves: the logits read (the loss alone),
plus the gradient written (loss and gradient).

Variants, the loss alone:
  old page          the old 06_cross_entropy's "ours": cross_entropy_rows(x, t, None, -100, True) then sum * scale
  old kernel        the old cross_entropy_kernel, WRITE_GRAD=False, its launch alone (weights of ones, ignore -100)
  new page 1        the new 06_cross_entropy's "ours": loss_rows(x, t).mean()
  new kernel 1      the new loss_kernel, its launch alone (no weights, no ignore_index, no evict_last hint)
  new kernel 1+hint the new loss_kernel with log_sum_exp(..., KEEP="evict_last"), as the old launch had
  new kernel 2      06_cross_entropy_and_gradient's cross_entropy_kernel, WRITE_GRAD=False (the drop-in's loss alone)
The loss and its gradient (step 1 and step 2 launches):
  old kernel / new kernel 2, each through its cross_entropy_rows (the same torch ops around them).
Step 0 at V = 32000 (bf16): the old ce_row_kernel (loss and gradient) and the new one (loss alone).
"""
import json, os, pathlib, sys, time

import torch, triton, triton.language as tl

sys.path.insert(0, "tests")
import conftest  # noqa: E402

OUT = pathlib.Path(os.environ.get("OUT", "/tmp"))
log = open(OUT / "ce_short.jsonl", "a")
ROWS = []


def emit(**r):
    ROWS.append(r)
    print(json.dumps(r), flush=True)
    log.write(json.dumps(r) + "\n")
    log.flush()


torch.cuda.set_stream(torch.cuda.Stream())  # graph capture needs a stream other than the default


def bench(fn):
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
        fn()
    return triton.testing.do_bench(graph.replay, warmup=25, rep=200, return_mode="median")


OLD = conftest.load_page(pathlib.Path("probe/old_06_cross_entropy.py"))
P1 = conftest.load_page(pathlib.Path("tutorials/06_cross_entropy.py"))
P2 = conftest.load_page(pathlib.Path("tutorials/06_cross_entropy_and_gradient.py"))
log_sum_exp = P1["log_sum_exp"]


@triton.jit
def loss_kernel_hint(x_ptr, target_ptr, loss_ptr, n_rows, n_cols, x_row_stride, CHUNK: tl.constexpr, STAGES: tl.constexpr):
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * x_row_stride
        x_t = tl.load(x_row + tl.load(target_ptr + row)).to(tl.float32)
        m, log_s = log_sum_exp(x_row, n_cols, CHUNK, STAGES, "evict_last")
        tl.store(loss_ptr + row, m - x_t + log_s)


TOTAL = {torch.bfloat16: 2**30, torch.float32: 2**29}
T0 = time.time()
for dtype in (torch.bfloat16, torch.float32):
    for v in (32000, 50304, 128256, 151936, 262144):
        x = torch.randn((TOTAL[dtype] // v, v), device="cuda", dtype=dtype)
        t = torch.randint(0, v, (len(x),), device="cuda")
        ones, scale, losses = torch.ones(v, device="cuda"), torch.ones((), device="cuda"), torch.empty(len(x), device="cuda")
        dx = torch.empty_like(x)
        read, both = x.numel() * x.element_size(), 2 * x.numel() * x.element_size()
        n, es, d = len(x), x.element_size(), str(dtype)[6:]
        old_meta, old_grid = OLD["_config"](n, v, es, grad=False)
        m1, g1 = P1["loss_config"](n, v, es)
        m2, g2 = P2["_config"](n, v, es, grad=False)
        alone = {
            "old page": lambda: (lambda r: (r[0].sum() * r[1]).to(x.dtype))(OLD["cross_entropy_rows"](x, t, None, -100, True)),
            "old kernel": lambda: OLD["cross_entropy_kernel"][(old_grid,)](
                x, t, ones, scale, losses, x, n, v, x.stride(0), x.stride(0), -100, WRITE_GRAD=False, **old_meta),
            "new page 1": lambda: P1["loss_rows"](x, t).mean().to(x.dtype),
            "new kernel 1": lambda: P1["loss_kernel"][(g1,)](x, t, losses, n, v, x.stride(0), **m1),
            "new kernel 1+hint": lambda: loss_kernel_hint[(g1,)](x, t, losses, n, v, x.stride(0), **m1),
            "new kernel 2": lambda: P2["cross_entropy_kernel"][(g2,)](
                x, t, ones, scale, losses, x, n, v, x.stride(0), x.stride(0), -100, WRITE_GRAD=False, **m2),
        }
        for name, fn in alone.items():
            ms = bench(fn)
            emit(what="loss alone", dtype=d, V=v, variant=name, ms=ms, gbs=read / ms * 1e-6)
        for step in (1, 2):
            for name, page in (("old kernel", OLD), ("new kernel 2", P2)):
                ms = bench(lambda: page["cross_entropy_rows"](x, t, None, -100, True, dx, step=step))
                emit(what=f"loss and gradient, step {step}", dtype=d, V=v, variant=name, ms=ms, gbs=both / ms * 1e-6)
        if v == 32000 and dtype == torch.bfloat16:
            ms = bench(lambda: OLD["step0_loss_and_grad"](x, t, dx))
            emit(what="step 0", dtype=d, V=v, variant="old (loss and gradient)", ms=ms, gbs=both / ms * 1e-6)
            ms = bench(lambda: P1["step0_loss"](x, t))
            emit(what="step 0", dtype=d, V=v, variant="new (loss alone)", ms=ms, gbs=read / ms * 1e-6)
        del x, t, dx
        torch.cuda.empty_cache()
emit(seconds=time.time() - T0)

print(f"\n{'what':32} {'dtype':9} {'V':>7}  GB/s by variant")
keys = {}
for r in ROWS:
    if "what" in r:
        keys.setdefault((r["what"], r["dtype"], r["V"]), []).append(f"{r['variant']} {r['gbs']:.0f}")
for (what, d, v), cells in keys.items():
    print(f"{what:32} {d:9} {v:>7}  " + " | ".join(cells))
