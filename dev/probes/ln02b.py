"""What costs 02's step 1 against step 0: one change at a time, at the config's launch and at step 0's."""
import importlib.util, json, os, pathlib, time
import torch, triton
OUT = pathlib.Path(os.environ.get("OUT", "/tmp"))
src = pathlib.Path("tutorials/02_layer_norm.py").read_text()
kernel = src[src.index("@triton.jit\ndef layer_norm_fwd_kernel"):src.index("# %%\n# Launch parameters")]
plain = src[src.index("@triton.jit\ndef plain_layer_norm_fwd_kernel"):src.index("def plain_forward")]
LOOP = "for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0)):"
X0 = "x0 = tl.load(x_ptr + rows * x_row_stride).to(tl.float32) * k"
STATS = """        if BLOCK_N >= 512:  # a row over whole warps: its statistics stored plainly
            tl.store(mean_ptr + rows, mean, mask=row_ok)
            tl.store(rstd_ptr + rows, rstd, mask=row_ok)"""
V = {"cur": kernel,
     "noloop": kernel.replace(LOOP, "for block in tl.range(pid, pid + 1):"),
     "noloop2": kernel.replace(LOOP, "for block in tl.static_range(1):").replace("rows = block * BLOCK_M", "rows = pid * BLOCK_M"),
     "nox0": kernel.replace(X0, "x0 = tl.zeros([BLOCK_M], tl.float32)"),
     "x0tile": kernel.replace(X0, "x0 = tl.sum(tl.where(cols[None, :] == 0, x, 0.0), axis=1) * k"),
     "nostats": kernel.replace(STATS, "        if BLOCK_N >= 512:\n            pass"),
     "noinf": kernel.replace('rstd = tl.where(q < float("inf"), k / tl.sqrt(q + eps * k * k), float("nan"))', "rstd = k / tl.sqrt(q + eps * k * k)"),
     }
V["noloop_nox0"] = V["noloop2"].replace(X0, "x0 = tl.zeros([BLOCK_M], tl.float32)")
for n, k in V.items():
    assert n == "cur" or k != kernel, n
code = "import triton, triton.language as tl\n" + "".join("\n" + k.replace("def layer_norm_fwd_kernel", f"def k_{n}") + "\n" for n, k in V.items()) + "\n" + plain
path = pathlib.Path("/tmp/ln_variants_b.py"); path.write_text(code)
spec = importlib.util.spec_from_file_location("ln_variants_b", path); mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
csv = open(OUT / "ln02b.jsonl", "a")
def emit(**r):
    print(json.dumps(r), flush=True); csv.write(json.dumps(r) + "\n"); csv.flush()
def ms(fn):
    fn(); torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")
DEV, T0 = "cuda", time.time()
for dtype, n, launches in ((torch.bfloat16, 8192, [(1, 4), (1, 8), (2, 8)]), (torch.float32, 16384, [(1, 32), (2, 32), (1, 16)]),
                           (torch.bfloat16, 2048, [(1, 4), (2, 4)]), (torch.bfloat16, 4096, [(1, 4), (2, 4)]),
                           (torch.bfloat16, 1024, [(4, 2), (4, 4)]), (torch.float32, 8192, [(1, 16), (1, 4)])):
    x = torch.randn(2**26 // n, n, device=DEV, dtype=dtype)
    y, w, b = torch.empty_like(x), torch.randn(n, device=DEV, dtype=dtype), torch.randn(n, device=DEV, dtype=dtype)
    mean, rstd = torch.empty(len(x), device=DEV), torch.empty(len(x), device=DEV)
    nb, bn = 2 * x.numel() * x.element_size(), triton.next_power_of_2(n)
    copy = nb / ms(lambda: y.copy_(x)) * 1e-6
    emit(dtype=str(dtype)[6:], N=n, v="plain4", pct=100 * nb / ms(lambda: mod.plain_layer_norm_fwd_kernel[(len(x),)](x, y, w, b, n, 1e-5, BLOCK_N=bn)) * 1e-6 / copy)
    for bm, nw in launches:
        for name in V:
            k = getattr(mod, f"k_{name}")
            g = ms(lambda: k[(triton.cdiv(len(x), bm),)](x, y, w, b, mean, rstd, *x.shape, x.stride(0), y.stride(0), 1e-5,
                                                         HAS_W=True, HAS_B=True, BLOCK_M=bm, BLOCK_N=bn, num_warps=nw))
            emit(dtype=str(dtype)[6:], N=n, v=name, BLOCK_M=bm, warps=nw, pct=100 * nb / g * 1e-6 / copy)
emit(t=time.time() - T0)
