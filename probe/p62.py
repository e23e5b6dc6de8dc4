"""Probe: launch and cache-hint variants of 02's forward and backward and 04's forward, at the front page's points
that fall short on the H200, each timed against the page's own launch in the same run. The page's launcher runs
with its config wrapped (warps, rows a program, programs, stages) or its kernel swapped for a text variant (cache
hint on x; "even": the column mask folded away, valid where N is the block's width). Prints JSON lines, GB/s.
Run from the repository root on a GPU: python3 probe/p62.py [ln_fwd rms_fwd ln_bwd]"""
import importlib.util, inspect, json, os, sys, time, pathlib
import torch
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
import triton

sys.path.insert(0, "tests")
from conftest import load_tutorial  # noqa: E402

GPU = torch.cuda.is_available()
TOTAL = 2**26 if GPU else 2**12
DEV = "cuda" if GPU else "cpu"
T0 = time.time()


def bench(fn):
    fn()
    if not GPU:
        return 1.0
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
        fn()
    return triton.testing.do_bench(g.replay, warmup=5, rep=20, return_mode="median")


_variants = {}
def variant(kernel, name, hint, even, load_marker):
    """The kernel's source with x's load hint replaced (and the column mask folded away where even), compiled anew."""
    key = (name, hint, even)
    if key in _variants:
        return _variants[key]
    src = inspect.getsource(kernel.fn)
    lines = src.splitlines()
    out = []
    for line in lines:
        if even and line.strip().startswith("col_ok = cols < n_cols"):
            line = line.replace("cols < n_cols", "cols < BLOCK_N")
        out.append(line)
    src = "\n".join(out) + "\n"
    for old in ('cache_modifier=".cg"', 'eviction_policy="evict_first"'):
        src = src.replace(", " + old, "")
    if hint:
        for marker in load_marker:
            src = src.replace(marker, marker[:-1] + ", " + hint + ")")
    path = pathlib.Path(f"/tmp/p62_{name}_{abs(hash(key))}.py")
    path.write_text("import triton, triton.language as tl\n" + src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _variants[key] = getattr(mod, kernel.fn.__name__)
    return _variants[key]


def emit(**kw):
    kw["t"] = round(time.time() - T0)
    print(json.dumps(kw), flush=True)


def ln_fwd():
    ns = load_tutorial("02_layer_norm")
    base_kernel, base_config = ns["layer_norm_fwd_kernel"], ns["_fwd_config"]
    markers = ["mask=col_ok[None, :], other=0.0)"]  # x's load, after the .cg is dropped
    for dtype, n_list in ((torch.bfloat16, (512, 1024, 2048, 4096, 8192, 16384)), (torch.float32, (512, 4096, 8192, 16384))):
        for n in (n_list if GPU else n_list[:1]):
            x = torch.randn(max(3, TOTAL // n), n, device=DEV, dtype=dtype)
            w, b = torch.randn(n, device=DEV, dtype=dtype), torch.randn(n, device=DEV, dtype=dtype)
            y, mean, rstd = torch.empty_like(x), torch.empty(len(x), device=DEV), torch.empty(len(x), device=DEV)
            light = 2 * x.numel() * x.element_size() / bench(lambda: y.copy_(x)) * 1e-6
            page_meta = {}
            def wrapped(*a, **k):
                meta, grid = base_config(*a, **k)
                page_meta.update(meta)
                meta = dict(meta)
                if "warps" in over: meta["num_warps"] = over["warps"]
                if "bm" in over: meta["BLOCK_M"] = over["bm"]
                return meta, triton.cdiv(a[0], meta["BLOCK_M"])
            ns["_fwd_config"] = wrapped
            res = dict(op="ln_fwd", dtype=str(dtype)[6:], n=n, light=round(light))
            cases = [("page", {}, '.cg', False)]
            for hint in ("", "evict_first"):
                cases.append((hint or "nohint", {}, hint, False))
            for hint in (".cg", "", "evict_first"):
                cases.append(((hint or "nohint") + "+even", {}, hint, True))
            over = {}
            ns["layer_norm_fwd_kernel"] = base_kernel
            ns["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)
            pm = dict(page_meta)
            res["page_meta"] = f"bm{pm['BLOCK_M']} w{pm['num_warps']}"
            for warps in (pm["num_warps"] // 2, pm["num_warps"] * 2):
                for bm in (pm["BLOCK_M"], pm["BLOCK_M"] * 2):
                    if 1 <= warps <= 32 and bm * n <= 65536:
                        for hint in (".cg", "evict_first"):
                            cases.append((f"{hint.strip('.') or 'nohint'}+even bm{bm} w{warps}", dict(warps=warps, bm=bm), hint, True))
            for label, o, hint, even in cases:
                over = o
                if label == "page":
                    ns["layer_norm_fwd_kernel"] = base_kernel
                else:
                    hint_arg = 'cache_modifier=".cg"' if hint == ".cg" else f'eviction_policy="{hint}"' if hint else ""
                    ns["layer_norm_fwd_kernel"] = variant(base_kernel, "lnf", hint_arg, even, markers)
                try:
                    ms = bench(lambda: ns["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5))
                    res[label] = round(2 * x.numel() * x.element_size() / ms * 1e-6)
                except Exception as err:
                    res[label] = str(err)[:80]
            emit(**res)
            ns["_fwd_config"], ns["layer_norm_fwd_kernel"] = base_config, base_kernel


def rms_fwd():
    ns = load_tutorial("04_rms_norm")
    base_kernel, base_config = ns["rms_norm_fwd_kernel"], ns["_fwd_config"]
    markers = ["mask=col_ok[None, :], other=0.0)"]
    for dtype, n_list in ((torch.bfloat16, (512, 2048, 8192, 16384)), (torch.float32, (2048, 4096, 16384))):
        for n in (n_list if GPU else n_list[:1]):
            x = torch.randn(max(3, TOTAL // n), n, device=DEV, dtype=dtype)
            w = torch.randn(n, device=DEV, dtype=dtype)
            y, rstd = torch.empty_like(x), torch.empty(len(x), device=DEV)
            light = 2 * x.numel() * x.element_size() / bench(lambda: y.copy_(x)) * 1e-6
            page_meta, over = {}, {}
            def wrapped(*a, **k):
                kernel, meta, grid = base_config(*a, **k)
                page_meta.update(meta)
                meta = dict(meta)
                if "warps" in over: meta["num_warps"] = over["warps"]
                if "bm" in over: meta["BLOCK_M"] = over["bm"]
                return ns["rms_norm_fwd_kernel"], meta, triton.cdiv(a[0], meta["BLOCK_M"])
            ns["_fwd_config"] = wrapped
            res = dict(op="rms_fwd", dtype=str(dtype)[6:], n=n, light=round(light))
            ns["rms_norm_rows_forward"](x, w, y, rstd, 1e-6)
            pm = dict(page_meta)
            res["page_meta"] = f"bm{pm['BLOCK_M']} w{pm['num_warps']}"
            cases = [("page", {}, None, False)]
            for hint in ("evict_first", ".cg"):
                cases.append((hint.strip("."), {}, hint, False))
            for hint in ("", "evict_first", ".cg"):
                cases.append(((hint.strip(".") or "nohint") + "+even", {}, hint, True))
            for warps in (pm["num_warps"] // 2, pm["num_warps"] * 2):
                for bm in (pm["BLOCK_M"], pm["BLOCK_M"] * 2):
                    if 1 <= warps <= 32 and bm * n <= 65536:
                        for hint in ("", "evict_first"):
                            cases.append((f"{hint or 'nohint'}+even bm{bm} w{warps}", dict(warps=warps, bm=bm), hint, True))
            for label, o, hint, even in cases:
                over = o
                if label == "page":
                    ns["rms_norm_fwd_kernel"] = base_kernel
                else:
                    hint_arg = 'cache_modifier=".cg"' if hint == ".cg" else f'eviction_policy="{hint}"' if hint else ""
                    ns["rms_norm_fwd_kernel"] = variant(base_kernel, "rmsf", hint_arg, even, markers)
                try:
                    ms = bench(lambda: ns["rms_norm_rows_forward"](x, w, y, rstd, 1e-6))
                    res[label] = round(2 * x.numel() * x.element_size() / ms * 1e-6)
                except Exception as err:
                    res[label] = str(err)[:80]
            emit(**res)
            ns["_fwd_config"], ns["rms_norm_fwd_kernel"] = base_config, base_kernel


def ln_bwd():
    ns = load_tutorial("02_layer_norm_backward")
    base_kernel, base_config = ns["layer_norm_bwd_kernel"], ns["_bwd_config"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count if GPU else 4
    markers = ["mask=ok, other=0.0)"]  # x's and dy's loads
    for dtype, n_list in ((torch.bfloat16, (512, 1024, 2048, 8192)), (torch.float32, (512, 8192))):
        for n in (n_list if GPU else n_list[:1]):
            x = torch.randn(max(3, TOTAL // n), n, device=DEV, dtype=dtype)
            w, b = torch.randn(n, device=DEV, dtype=dtype), torch.randn(n, device=DEV, dtype=dtype)
            dy, dx = torch.randn_like(x), torch.empty_like(x)
            mean, rstd, dw, db = (torch.empty(k, device=DEV) for k in (len(x), len(x), n, n))
            ns["layer_norm_rows_forward"](x, dx, w, b, mean, rstd, 1e-5)
            light = 2 * x.numel() * x.element_size() / bench(lambda: dx.copy_(x)) * 1e-6
            page_meta, over = {}, {}
            def wrapped(*a, **k):
                meta, lines = base_config(*a, **k)
                page_meta.update(meta)
                meta = dict(meta)
                if "warps" in over: meta["num_warps"] = over["warps"]
                return meta, lines
            ns["_bwd_config"] = wrapped
            res = dict(op="ln_bwd", dtype=str(dtype)[6:], n=n, light=round(light))
            ns["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db)
            pm = dict(page_meta)
            res["page_meta"] = f"bm{pm['BLOCK_M']} w{pm['num_warps']} s{pm['STAGES']}"
            cases = [("page", {}, None, None, None)]
            for mult in (2, 3, 4):
                for warps in (pm["num_warps"], 2 * pm["num_warps"]):
                    cases.append((f"p{mult} w{warps}", dict(warps=warps), None, mult * sms, None))
            for stages in (1, 2, 3):
                cases.append((f"p2 s{stages}", {}, None, 2 * sms, stages))
            cases.append(("p1 w2x", dict(warps=2 * pm["num_warps"]), None, None, None))
            cases.append(("evict_first", {}, "evict_first", None, None))
            cases.append(("evict_first p2", {}, "evict_first", 2 * sms, None))
            for label, o, hint, programs, stages in cases:
                over = o
                ns["layer_norm_bwd_kernel"] = base_kernel if hint is None else variant(
                    base_kernel, "lnb", f'eviction_policy="{hint}"', False, markers)
                try:
                    ms = bench(lambda: ns["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db,
                                                                      programs=programs, stages=stages))
                    res[label] = round(3 * x.numel() * x.element_size() / ms * 1e-6)
                except Exception as err:
                    res[label] = str(err)[:80]
            emit(**res)
            ns["_bwd_config"], ns["layer_norm_bwd_kernel"] = base_config, base_kernel


if __name__ == "__main__":
    if GPU:
        torch.cuda.set_stream(torch.cuda.Stream())
    emit(device=torch.cuda.get_device_name() if GPU else "cpu", torch=torch.__version__, triton=triton.__version__)
    for name in sys.argv[1:] or ["ln_fwd", "rms_fwd", "ln_bwd"]:
        try:
            globals()[name]()
        except Exception as err:
            import traceback; traceback.print_exc()
            emit(op=name, error=str(err)[:300])
