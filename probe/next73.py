"""Launch variants for three more rows that miss on an H200, one GPU run (about 2 min): 01B's backward with y and dy
held in 16 bits; 03's row sums' tile, step and warps; 06's loss chunk and warps. do_bench median, L2 flushed, the
pages' sizes, GB/s as each page counts them; each variant checked against the page's own output.
From the repository root: python3 probe/next73.py (no GPU: a small functional run through Triton's interpreter)."""
import inspect, json, os, sys

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, "tests")
from conftest import load_tutorial  # noqa: E402
import importlib.util, pathlib  # noqa: E402

ON_GPU = torch.cuda.is_available()
DEV = "cuda" if ON_GPU else "cpu"
ms = (lambda fn: triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")) if ON_GPU else None
TOTAL = 2**26 if ON_GPU else 2**12


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


def copy_gbs(x):
    out = torch.empty_like(x)
    return round(2 * x.numel() * x.element_size() / ms(lambda: out.copy_(x)) * 1e-6) if ON_GPU else None


def timed(row, tag, run, result, nbytes, numel, ref):
    try:
        run()
        got = result()
        if ref is not None:
            torch.testing.assert_close(got, ref, atol=4e-2, rtol=2e-2)
        row[tag] = round(nbytes * numel / ms(run) * 1e-6) if ON_GPU else "ok"
        return got
    except Exception as e:  # noqa: BLE001
        row[tag] = f"error: {type(e).__name__}: {str(e)[:160]}"
        return ref



# ---- 01B: y and dy held in 16 bits
smb = load_tutorial("01_softmax_backward")
g_smb = smb["softmax_rows_backward"].__globals__
cfg_fused = g_smb["_fused_config"]
k_page = g_smb["softmax_bwd_kernel"]
k16 = variant(g_smb, "softmax_bwd_kernel", [
    ('eviction_policy="evict_last").to(tl.float32)\n    dy', 'eviction_policy="evict_last")\n    dy'),
    ('                 eviction_policy="evict_last").to(tl.float32)\n', '                 eviction_policy="evict_last")\n'),
    ("dx = y * (dy - tl.sum(y * dy, axis=1)[:, None])",
     "dx = y.to(tl.float32) * (dy.to(tl.float32) - tl.sum(y.to(tl.float32) * dy.to(tl.float32), axis=1)[:, None])")],
    "held16")
for dtype in (torch.bfloat16,):
    for n in ([4096, 8192, 16384] if ON_GPU else [1000]):
        m = TOTAL // n
        y = torch.softmax(torch.randn(m, n, device=DEV), 1).to(dtype)
        dy, dx = torch.randn_like(y), torch.empty_like(y)
        row, ref = {"case": "01B backward", "dtype": str(dtype)[6:], "N": n, "copy": copy_gbs(y)}, None
        for tag, kernel, size in (("page", k_page, 4), ("held16, fp32 warps", k16, 4), ("held16, 16-bit warps", k16, 2)):
            g_smb["softmax_bwd_kernel"] = kernel
            g_smb["_fused_config"] = lambda n_cols, element_size, size=size: cfg_fused(n_cols, size)
            row[tag + " cfg"] = str(cfg_fused(n, size))
            got = timed(row, tag, lambda: g_smb["softmax_rows_backward"](y, dy, dx), lambda: dx.clone(), 3,
                        y.numel() * y.element_size(), ref)
            ref = got if ref is None else ref
        g_smb["softmax_bwd_kernel"], g_smb["_fused_config"] = k_page, cfg_fused
        print(json.dumps(row), flush=True)
        del y, dy, dx

# ---- 03: row sums
red = load_tutorial("03_parallel_reduction")
g_red = red["sum_rows"].__globals__
cfg_row = g_red["_row_config"]


def row_cfg(cap, tile, per_thread, most=16):
    def config(n_rows, n_cols):
        block_n = min(triton.next_power_of_2(n_cols), cap)
        block_m = max(1, min(tile // block_n, triton.next_power_of_2(n_rows)))
        return block_m, block_n, min(most, max(4, block_m * block_n // (32 * per_thread)))
    return config


ROW = {"page": cfg_row, "cap4096": row_cfg(4096, 4096, 16), "cap8192 t8192": row_cfg(8192, 8192, 16, 32),
       "t8192": row_cfg(2048, 8192, 16, 32), "t8192 32/thr": row_cfg(2048, 8192, 32), "cap4096 32/thr": row_cfg(4096, 4096, 32),
       "cap16384 t16384 32/thr": row_cfg(16384, 16384, 32, 32), "8/thr": row_cfg(2048, 4096, 8, 32)}
for dtype in (torch.float32, torch.bfloat16):
    for n in ([1024, 4096, 16384, 65536] if ON_GPU else [1000]):
        m = TOTAL // n
        x = torch.randn(m, n, device=DEV, dtype=dtype)
        out = torch.empty(m, device=DEV, dtype=dtype)
        row, ref = {"case": "03 row sums", "dtype": str(dtype)[6:], "N": n, "copy": copy_gbs(x)}, None
        for tag, cfg in ROW.items():
            g_red["_row_config"] = cfg
            row[tag + " cfg"] = str(cfg(m, n))
            got = timed(row, tag, lambda: g_red["sum_rows"](x, out), lambda: out.float().clone(), 1,
                        x.numel() * x.element_size(), ref)
            ref = got if ref is None else ref
        g_red["_row_config"] = cfg_row
        print(json.dumps(row), flush=True)
        del x

# ---- 06: the loss's chunk and warps
ce = load_tutorial("06_cross_entropy")
g_ce = ce["loss_rows"].__globals__
cfg_loss = g_ce["loss_config"]


def loss_cfg(chunk, warps):
    def config(n_rows, n_cols, element_size, step=2):
        meta = dict(CHUNK=max(16, min(chunk, triton.next_power_of_2(n_cols))), num_warps=warps)
        per_sm = g_ce["WARPS_PER_SM"] // warps
        sm_stages = 1 + g_ce["SMEM_PER_SM"] // (per_sm * meta["CHUNK"] * element_size)
        return meta | dict(STAGES=min(3, sm_stages)), min(n_rows, per_sm * g_ce["NUM_SMS"])
    return config


LOSS = {"page": cfg_loss} | {f"{c}/{w}": loss_cfg(c, w) for c, w in ((2048, 2), (2048, 4), (4096, 4), (4096, 8),
                                                                     (1024, 1), (1024, 4), (8192, 8))}
TOT = {torch.bfloat16: 2**30, torch.float32: 2**29} if ON_GPU else {torch.bfloat16: 2**12, torch.float32: 2**12}
for dtype in (torch.bfloat16, torch.float32):
    for v in ([32000, 50304, 128256] if ON_GPU else [300]):
        m = TOT[dtype] // v
        x = torch.randn(m, v, device=DEV, dtype=dtype)
        target = torch.randint(0, v, (m,), device=DEV)
        row, ref = {"case": "06 loss", "dtype": str(dtype)[6:], "N": v}, None
        for tag, cfg in LOSS.items():
            g_ce["loss_config"] = cfg
            holder = {}
            got = timed(row, tag, lambda: holder.__setitem__("l", g_ce["loss_rows"](x, target)),
                        lambda: holder["l"].clone(), 1, x.numel() * x.element_size(), ref)
            ref = got if ref is None else ref
        g_ce["loss_config"] = cfg_loss
        print(json.dumps(row), flush=True)
        del x
