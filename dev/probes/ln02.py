"""02's forward kernel, variants x launches, on the lent GPU: GB/s of x read + y written (2^26 elements)."""
import importlib.util, json, os, pathlib, re, sys, time
import torch, triton
OUT = pathlib.Path(os.environ.get("OUT", "/tmp"))
src = pathlib.Path("tutorials/02_layer_norm.py").read_text()
kernel = src[src.index("@triton.jit\ndef layer_norm_fwd_kernel"):src.index("# %%\n# Launch parameters")]
plain = src[src.index("@triton.jit\ndef plain_layer_norm_fwd_kernel"):src.index("def plain_forward")]
V = {"cur": kernel,
     "nocg": kernel.replace(', cache_modifier=".cg"', ""),
     "noloop": kernel.replace("for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0)):", "for block in tl.range(pid, pid + 1):"),
     "wbfirst": kernel.replace("        x = tl.load(x_ptr", "        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)\n        b = tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)\n        x = tl.load(x_ptr")
                 .replace("tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :] if HAS_W", "w[None, :] if HAS_W")
                 .replace("tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :] if HAS_B", "b[None, :] if HAS_B"),
     }
del V["noloop"]
code = "import triton, triton.language as tl\n"
for name, k in V.items():
    code += "\n" + k.replace("def layer_norm_fwd_kernel", f"def k_{name}") + "\n"
code += "\n" + plain
path = pathlib.Path("/tmp/ln_variants.py"); path.write_text(code)
spec = importlib.util.spec_from_file_location("ln_variants", path); mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
csv = open(OUT / "ln02.jsonl", "a")
def emit(**r):
    print(json.dumps(r), flush=True); csv.write(json.dumps(r) + "\n"); csv.flush()
def ms(fn):
    fn(); torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")
DEV = "cuda"
T0 = time.time()
CAP = float(os.environ.get("CAP", 150))
for dtype, n in ((torch.float32, 16384), (torch.bfloat16, 8192), (torch.bfloat16, 1024), (torch.float32, 8192),
                 (torch.bfloat16, 2048), (torch.bfloat16, 512), (torch.float32, 512), (torch.bfloat16, 4096),
                 (torch.float32, 2048), (torch.bfloat16, 16384)):
        if time.time() - T0 > CAP:
            break
        x = torch.randn(2**26 // n, n, device=DEV, dtype=dtype)
        y, w, b = torch.empty_like(x), torch.randn(n, device=DEV, dtype=dtype), torch.randn(n, device=DEV, dtype=dtype)
        mean, rstd = torch.empty(len(x), device=DEV), torch.empty(len(x), device=DEV)
        nb = 2 * x.numel() * x.element_size()
        emit(dtype=str(dtype)[6:], N=n, v="copy", gbs=nb / ms(lambda: y.copy_(x)) * 1e-6)
        bn = triton.next_power_of_2(n)
        emit(dtype=str(dtype)[6:], N=n, v="plain4", gbs=nb / ms(lambda: mod.plain_layer_norm_fwd_kernel[(len(x),)](x, y, w, b, n, 1e-5, BLOCK_N=bn)) * 1e-6)
        bm0 = max(1, 4096 // bn)
        for bm in sorted({bm0, 2 * bm0}):
            for nw in (1, 2, 4, 8, 16, 32):
                pt = bm * bn * x.element_size() // (32 * nw)
                if pt not in (32, 64, 128, 256) or bm * bn > 32768:
                    continue
                for name in V:
                    k = getattr(mod, f"k_{name}")
                    try:
                        g = ms(lambda: k[(triton.cdiv(len(x), bm),)](x, y, w, b, mean, rstd, *x.shape, x.stride(0), y.stride(0), 1e-5,
                                                                     HAS_W=True, HAS_B=True, BLOCK_M=bm, BLOCK_N=bn, num_warps=nw))
                        emit(dtype=str(dtype)[6:], N=n, v=name, BLOCK_M=bm, warps=nw, bpt=pt, gbs=nb / g * 1e-6)
                    except Exception as e:
                        emit(dtype=str(dtype)[6:], N=n, v=name, BLOCK_M=bm, warps=nw, error=str(e)[:200])
        emit(t=time.time() - T0)

# 04's RMSNorm forward: w loaded after the reduction (the page) or with x; bytes a thread 32..256
src4 = pathlib.Path("tutorials/04_rms_norm.py").read_text()
k4 = src4[src4.index("@triton.jit\ndef rms_norm_fwd_kernel"):src4.index("def _fwd_config(")]
V4 = {"cur": k4, "wfirst": k4.replace("    x = tl.load(x_ptr", "    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)\n    x = tl.load(x_ptr", 1)
      .replace("tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]", "w[None, :]")}
code4 = "import triton, triton.language as tl\n" + "".join("\n" + k.replace("def rms_norm_fwd_kernel", f"def r_{n}") + "\n" for n, k in V4.items())
p4 = pathlib.Path("/tmp/rms_variants.py"); p4.write_text(code4)
spec = importlib.util.spec_from_file_location("rms_variants", p4); m4 = importlib.util.module_from_spec(spec); spec.loader.exec_module(m4)
for dtype, n in ((torch.float32, 16384), (torch.bfloat16, 8192), (torch.float32, 8192), (torch.bfloat16, 1024),
                 (torch.float32, 512), (torch.bfloat16, 2048)):
        if time.time() - T0 > 2 * CAP:
            break
        x = torch.randn(2**26 // n, n, device=DEV, dtype=dtype)
        y, w = torch.empty_like(x), torch.randn(n, device=DEV, dtype=dtype)
        rstd = torch.empty(len(x), device=DEV)
        nb = 2 * x.numel() * x.element_size()
        emit(sec="04", dtype=str(dtype)[6:], N=n, v="copy", gbs=nb / ms(lambda: y.copy_(x)) * 1e-6)
        bn = triton.next_power_of_2(n)
        bm0 = max(1, 4096 // bn)
        for bm in sorted({bm0, 2 * bm0}):
            for nw in (1, 2, 4, 8, 16, 32):
                pt = bm * bn * x.element_size() // (32 * nw)
                if pt not in (32, 64, 128, 256) or bm * bn > 32768:
                    continue
                for name in V4:
                    k = getattr(m4, f"r_{name}")
                    g = ms(lambda: k[(triton.cdiv(len(x), bm),)](x, w, y, rstd, *x.shape, x.stride(0), y.stride(0), 1e-6,
                                                                 HAS_WEIGHT=True, BLOCK_M=bm, BLOCK_N=bn, num_warps=nw))
                    emit(sec="04", dtype=str(dtype)[6:], N=n, v=name, BLOCK_M=bm, warps=nw, bpt=pt, gbs=nb / g * 1e-6)
emit(t=time.time() - T0)
