"""evict_last on the loads of the other kernels that read and write alike, one GPU run (about 90 s on an H200):
02's forward (x), 02's backward (x, dy), 04's backward (x, dy). Each page's kernel is rewritten with the hint
(a copy in probe/_v/), swapped into the page's launcher, checked against the page's own output, and timed against
it: do_bench median, L2 flushed, 2**26 elements, GB/s (02 forward x, y; backward x, dy, dx), beside a copy.
From the repository root: python3 probe/next69.py (no GPU: a small functional run through Triton's interpreter)."""
import importlib.util, inspect, json, os, pathlib, sys

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
import triton  # noqa: E402

sys.path.insert(0, "tests")
from conftest import load_tutorial  # noqa: E402

ON_GPU = torch.cuda.is_available()
DEV = "cuda" if ON_GPU else "cpu"
ms = (lambda fn: triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")) if ON_GPU else None
TOTAL = 2**26 if ON_GPU else 2**12
LAST = ', eviction_policy="evict_last")'


def variant(scope, name, subs, tag):
    src = inspect.getsource(scope[name].fn)
    for a, b in subs:
        assert src.count(a) == 1, (name, a)
        src = src.replace(a, b)
    path = pathlib.Path(f"probe/_v/{name}_{tag}.py")
    path.parent.mkdir(exist_ok=True)
    path.write_text("import triton\nimport triton.language as tl\n" + src)
    spec = importlib.util.spec_from_file_location(f"v_{name}_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update({k: v for k, v in scope.items() if not k.startswith("__") and k != name})
    spec.loader.exec_module(module)
    return getattr(module, name)


ln, lnb, rmsb = load_tutorial("02_layer_norm"), load_tutorial("02_layer_norm_backward"), load_tutorial("04_rms_norm_backward")
g_ln = ln["layer_norm_rows_forward"].__globals__
g_lnb = lnb["layer_norm_rows_backward"].__globals__
g_rmsb = rmsb["rms_norm_rows_backward"].__globals__
X_LOAD = "mask=col_ok[None, :], other=0.0)"
CASES = {
    "02 forward": (g_ln, "layer_norm_fwd_kernel", [("x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], "
                                                   + X_LOAD, "x = tl.load(x_ptr + rows[:, None] * x_row_stride + "
                                                   "cols[None, :], " + X_LOAD[:-1] + LAST)]),
    "02 backward": (g_lnb, "layer_norm_bwd_kernel", [
        ("x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=ok, other=0.0)",
         "x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=ok, other=0.0" + LAST),
        ("dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=ok, other=0.0)",
         "dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=ok, other=0.0" + LAST)]),
    "04 backward": (g_rmsb, "rms_norm_bwd_kernel", [
        ("x_next, dy_next = tl.load(x_ptr + offs, mask=mask, other=0.0), tl.load(dy_ptr + offs, mask=mask, other=0.0)\n"
         "    for",
         "x_next, dy_next = tl.load(x_ptr + offs, mask=mask, other=0.0" + LAST + ", tl.load(dy_ptr + offs, mask=mask, "
         "other=0.0" + LAST + "\n    for"),
        ("x_next, dy_next = tl.load(x_ptr + offs, mask=mask, other=0.0), tl.load(dy_ptr + offs, mask=mask, other=0.0)\n"
         "        x_hat",
         "x_next, dy_next = tl.load(x_ptr + offs, mask=mask, other=0.0" + LAST + ", tl.load(dy_ptr + offs, mask=mask, "
         "other=0.0" + LAST + "\n        x_hat")]),
}
for case, (scope, name, subs) in CASES.items():
    original = scope[name]
    try:
        hinted = variant(scope, name, subs, "last")
    except AssertionError as e:
        print(json.dumps({"case": case, "error": str(e)}), flush=True)
        continue
    for dtype in (torch.float32, torch.bfloat16):
        for n in [512, 1024, 2048, 4096, 8192, 16384] if ON_GPU else [512, 1000]:
            m = TOTAL // n
            x = torch.randn(m, n, device=DEV, dtype=dtype)
            dy, w, b = torch.randn_like(x), torch.rand(n, device=DEV, dtype=dtype) + 0.5, torch.randn(n, device=DEV,
                                                                                                     dtype=dtype)
            mean, rstd = torch.empty(m, device=DEV), torch.empty(m, device=DEV)
            out, y = torch.empty_like(x), torch.empty_like(x)
            if case == "02 forward":
                run, nbytes = lambda: scope["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5), 2
                result = lambda: y.clone()
            elif case == "02 backward":
                g_ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)
                dw, db = torch.empty(n, device=DEV), torch.empty(n, device=DEV)
                run, nbytes = lambda: scope["layer_norm_rows_backward"](x, dy, y, w, mean, rstd, dw, db), 3
                result = lambda: torch.cat([y.flatten().float(), dw, db])
            else:
                rstd = torch.rsqrt(x.float().pow(2).mean(1) + 1e-6)
                holder = {}
                run, nbytes = lambda: holder.__setitem__("dw", scope["rms_norm_rows_backward"](x, w, rstd, dy, y)), 3
                result = lambda: torch.cat([y.flatten().float(), holder["dw"]])
            gbs = lambda t: nbytes * x.numel() * x.element_size() / t * 1e-6
            row = {"case": case, "dtype": str(dtype)[6:], "N": n,
                   "copy": round(2 * x.numel() * x.element_size() / ms(lambda: out.copy_(x)) * 1e-6) if ON_GPU else None}
            for tag, kernel in (("page", original), ("evict_last", hinted)):
                scope[name] = kernel
                run()
                got = result()
                if tag == "page":
                    ref = got
                else:
                    torch.testing.assert_close(got, ref, atol=1e-3, rtol=1e-3)
                row[tag] = round(gbs(ms(run))) if ON_GPU else "ok"
            scope[name] = original
            print(json.dumps(row), flush=True)
