"""Launch variants for the rows that miss on an H200, one GPU run (about 3 min): 02's forward on 04's launch model
(min_tile_bytes, 128 or 64 bytes a thread) with and without evict_last; 01B's backward at 32 warps and as a looped
two-pass kernel; 04B's backward tile and warps; 02B's backward warps, stages and programs. do_bench median, L2
flushed, 2**26 elements, GB/s, beside a copy; each variant checked against the page's own output.
From the repository root: python3 probe/next70.py (no GPU: a small functional run through Triton's interpreter)."""
import importlib.util, inspect, json, os, pathlib, sys

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, "tests")
from conftest import load_tutorial  # noqa: E402

ON_GPU = torch.cuda.is_available()
DEV = "cuda" if ON_GPU else "cpu"
ms = (lambda fn: triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")) if ON_GPU else None
TOTAL = 2**26 if ON_GPU else 2**12
LAST = ', eviction_policy="evict_last")'
NS = [512, 1024, 2048, 4096, 8192, 16384] if ON_GPU else [512, 1000]


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
            torch.testing.assert_close(got, ref, atol=2e-3, rtol=2e-3)
        row[tag] = round(nbytes * numel / ms(run) * 1e-6) if ON_GPU else "ok"
        return got
    except Exception as e:  # noqa: BLE001
        row[tag] = f"error: {type(e).__name__}: {str(e)[:160]}"
        return ref


sm = load_tutorial("01_fused_softmax")
MTB = sm["min_tile_bytes"]()

# ---- 02's forward
ln = load_tutorial("02_layer_norm")
g_ln = ln["layer_norm_rows_forward"].__globals__
X_LOAD = "mask=col_ok[None, :], other=0.0)"
fwd_plain = g_ln["layer_norm_fwd_kernel"]
fwd_hint = variant(g_ln, "layer_norm_fwd_kernel", [(
    "x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], " + X_LOAD,
    "x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], " + X_LOAD[:-1] + LAST)], "last")
cfg_page = g_ln["_fwd_config"]


def cfg_model(bpt, least=4):
    def config(n_rows, n_cols, element_size, occupancy):
        block_n = triton.next_power_of_2(n_cols)
        block_m = max(1, MTB // (block_n * element_size))
        warps = min(32, max(least, block_m * block_n * element_size // (32 * bpt)))
        return dict(BLOCK_M=block_m, BLOCK_N=block_n, EVEN=n_cols == block_n, num_warps=warps), \
            triton.cdiv(n_rows, block_m)
    return config


FWD = {"page": (fwd_plain, cfg_page), "page+last": (fwd_hint, cfg_page), "m128": (fwd_plain, cfg_model(128)),
       "m128+last": (fwd_hint, cfg_model(128)), "m64+last": (fwd_hint, cfg_model(64)),
       "m256+last": (fwd_hint, cfg_model(256))}
print(json.dumps({"min_tile_bytes": MTB}), flush=True)
for dtype in (torch.float32, torch.bfloat16):
    for n in NS:
        m = TOTAL // n
        x = torch.randn(m, n, device=DEV, dtype=dtype)
        w, b = torch.rand(n, device=DEV, dtype=dtype) + 0.5, torch.randn(n, device=DEV, dtype=dtype)
        mean, rstd, y = torch.empty(m, device=DEV), torch.empty(m, device=DEV), torch.empty_like(x)
        row, ref = {"case": "02 forward", "dtype": str(dtype)[6:], "N": n, "copy": copy_gbs(x)}, None
        for tag, (kernel, cfg) in FWD.items():
            seen = {}
            g_ln["layer_norm_fwd_kernel"] = kernel
            g_ln["_fwd_config"] = lambda *a, cfg=cfg, seen=seen: seen.setdefault("r", cfg(*a))
            got = timed(row, tag, lambda: g_ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5),
                        lambda: y.clone(), 2, x.numel() * x.element_size(), ref)
            ref = got if ref is None else ref
            meta = seen["r"][0]
            row[tag + " cfg"] = f"{meta['BLOCK_M']}x{meta['BLOCK_N']}/{meta['num_warps']}"
        g_ln["layer_norm_fwd_kernel"], g_ln["_fwd_config"] = fwd_plain, cfg_page
        print(json.dumps(row), flush=True)
        del x, y

# ---- 01B's backward: 32 warps, and a looped two-pass kernel


@triton.jit
def softmax_bwd_looped(y_ptr, dy_ptr, dx_ptr, n_cols, y_row_stride, dy_row_stride, dx_row_stride,
                       CHUNK: tl.constexpr, LAST_HINT: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([CHUNK], tl.float32)
    for start in range(0, n_cols, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        ok = cols < n_cols
        if LAST_HINT:
            y = tl.load(y_ptr + row * y_row_stride + cols, mask=ok, other=0.0, eviction_policy="evict_last")
            dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=ok, other=0.0, eviction_policy="evict_last")
        else:
            y = tl.load(y_ptr + row * y_row_stride + cols, mask=ok, other=0.0)
            dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=ok, other=0.0)
        acc += y.to(tl.float32) * dy.to(tl.float32)
    s = tl.sum(acc, axis=0)
    for start in range(0, n_cols, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        ok = cols < n_cols
        y = tl.load(y_ptr + row * y_row_stride + cols, mask=ok, other=0.0, eviction_policy="evict_first")
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=ok, other=0.0, eviction_policy="evict_first")
        dx = y.to(tl.float32) * (dy.to(tl.float32) - s)
        tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=ok)


smb = load_tutorial("01_softmax_backward")
g_smb = smb["softmax_rows_backward"].__globals__
cfg_fused = g_smb["_fused_config"]


def fused_warps(factor):
    def config(n_cols, element_size):
        bm, bn, w = cfg_fused(n_cols, element_size)
        return bm, bn, int(min(32, w * factor))
    return config


for dtype in (torch.bfloat16, torch.float32):
    for n in ([2048, 4096, 8192, 16384] if ON_GPU else [1000]):
        m = TOTAL // n
        y = torch.softmax(torch.randn(m, n, device=DEV), 1).to(dtype)
        dy, dx = torch.randn_like(y), torch.empty_like(y)
        row, ref = {"case": "01B backward", "dtype": str(dtype)[6:], "N": n, "copy": copy_gbs(y)}, None
        for tag, cfg in (("page", cfg_fused), ("x2 warps", fused_warps(2)), ("x0.5 warps", fused_warps(0.5))):
            g_smb["_fused_config"] = cfg
            row[tag + " cfg"] = str(cfg(n, 4))
            got = timed(row, tag, lambda: g_smb["softmax_rows_backward"](y, dy, dx), lambda: dx.clone(), 3,
                        y.numel() * y.element_size(), ref)
            ref = got if ref is None else ref
        g_smb["_fused_config"] = cfg_fused
        for chunk, warps in ((2048, 8), (4096, 8), (4096, 16), (8192, 16), (8192, 32)):
            for hint in (False, True):
                chunk_ = min(chunk, triton.next_power_of_2(n)) if ON_GPU else 256
                timed(row, f"loop {chunk_}/{warps}{'+last' if hint else ''}",
                      lambda: softmax_bwd_looped[(m,)](y, dy, dx, n, y.stride(0), dy.stride(0), dx.stride(0),
                                                       CHUNK=chunk_, LAST_HINT=hint, num_warps=warps),
                      lambda: dx.clone(), 3, y.numel() * y.element_size(), ref)
        print(json.dumps(row), flush=True)
        del y, dy, dx

# ---- 04B's backward: tile elements, bytes a thread, programs an SM
rmsb = load_tutorial("04_rms_norm_backward")
g_rmsb = rmsb["rms_norm_rows_backward"].__globals__
base = {k: g_rmsb[k] for k in ("MIN_ELEMENTS", "_warps", "NUM_SMS")}
RMSB = {"page": {}, "min2048": {"MIN_ELEMENTS": 2048}, "min8192": {"MIN_ELEMENTS": 8192},
        "bpt x2": {"_warps": lambda n, es, bpt: base["_warps"](n, es, 2 * bpt)},
        "bpt /2": {"_warps": lambda n, es, bpt: base["_warps"](n, es, max(1, bpt // 2))},
        "sms x2": {"NUM_SMS": 2 * base["NUM_SMS"]}, "sms /2": {"NUM_SMS": max(1, base["NUM_SMS"] // 2)},
        "min8192 bpt x2": {"MIN_ELEMENTS": 8192, "_warps": lambda n, es, bpt: base["_warps"](n, es, 2 * bpt)}}
for dtype in (torch.bfloat16, torch.float32):
    for n in ([512, 1024, 2048, 8192] if ON_GPU else [512]):
        m = TOTAL // n
        x = torch.randn(m, n, device=DEV, dtype=dtype)
        dy, dx, w = torch.randn_like(x), torch.empty_like(x), torch.rand(n, device=DEV, dtype=dtype) + 0.5
        rstd = torch.rsqrt(x.float().pow(2).mean(1) + 1e-6)
        row, ref, hold = {"case": "04B backward", "dtype": str(dtype)[6:], "N": n, "copy": copy_gbs(x)}, None, {}
        for tag, sub in RMSB.items():
            g_rmsb.update(base)
            g_rmsb.update(sub)
            _, meta, grid = g_rmsb["_bwd_config"](m, n, x.element_size())
            row[tag + " cfg"] = f"{meta['BLOCK_M']}x{meta['BLOCK_N']}/{meta['num_warps']}/{grid}"
            got = timed(row, tag, lambda: hold.__setitem__("dw", g_rmsb["rms_norm_rows_backward"](x, w, rstd, dy, dx)
                                                           .to(w.dtype)),
                        lambda: torch.cat([dx.flatten().float(), hold["dw"].float()]), 3,
                        x.numel() * x.element_size(), ref)
            ref = got if ref is None else ref
        g_rmsb.update(base)
        print(json.dumps(row), flush=True)
        del x, dy, dx

# ---- 02B's backward: warps, stages, programs
lnb = load_tutorial("02_layer_norm_backward")
g_lnb = lnb["layer_norm_rows_backward"].__globals__
cfg_bwd = g_lnb["_bwd_config"]


def bwd_warps(factor):
    def config(*a, **k):
        meta, lines = cfg_bwd(*a, **k)
        return dict(meta, num_warps=max(1, min(32, int(meta["num_warps"] * factor)))), lines
    return config


for dtype in (torch.float32, torch.bfloat16):
    for n in ([512, 2048, 4096, 8192] if ON_GPU else [512]):
        m = TOTAL // n
        x = torch.randn(m, n, device=DEV, dtype=dtype)
        dy, dx = torch.randn_like(x), torch.empty_like(x)
        w, b = torch.rand(n, device=DEV, dtype=dtype) + 0.5, torch.randn(n, device=DEV, dtype=dtype)
        mean, rstd, y = torch.empty(m, device=DEV), torch.empty(m, device=DEV), torch.empty_like(x)
        g_ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)
        dw, db = torch.empty(n, device=DEV), torch.empty(n, device=DEV)
        row, ref = {"case": "02B backward", "dtype": str(dtype)[6:], "N": n, "copy": copy_gbs(x)}, None
        meta, lines = cfg_bwd(m, n, x.element_size())
        row["page cfg"] = f"{meta['BLOCK_M']}x{meta['BLOCK_N']}/{meta['num_warps']}/st{meta['STAGES']}/{lines}"
        for tag, cfg, kw in (("page", cfg_bwd, {}), ("warps x2", bwd_warps(2), {}), ("warps /2", bwd_warps(0.5), {}),
                             ("st2", cfg_bwd, {"stages": 2}), ("st3", cfg_bwd, {"stages": 3}),
                             ("st4", cfg_bwd, {"stages": 4}),
                             ("progs x2", cfg_bwd, {"programs": 2 * g_lnb["NUM_SMS"]}),
                             ("progs x2 st2", cfg_bwd, {"programs": 2 * g_lnb["NUM_SMS"], "stages": 2}),
                             ("warps x2 progs x2 st2", bwd_warps(2), {"programs": 2 * g_lnb["NUM_SMS"], "stages": 2})):
            g_lnb["_bwd_config"] = cfg
            got = timed(row, tag, lambda: g_lnb["layer_norm_rows_backward"](x, dy, dx, w, mean, rstd, dw, db, **kw),
                        lambda: torch.cat([dx.flatten().float(), dw, db]), 3, x.numel() * x.element_size(), ref)
            ref = got if ref is None else ref
        g_lnb["_bwd_config"] = cfg_bwd
        print(json.dumps(row), flush=True)
        del x, dy, dx, y
