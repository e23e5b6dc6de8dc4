"""02 forward: explicit tiles and warps with and without evict_last at the points that miss (after next70).
Launch variants for the rows that miss on an H200, one GPU run (about 3 min): 02's forward on 04's launch model
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



def fixed(block_m, warps):
    def config(n_rows, n_cols, element_size, occupancy):
        block_n = triton.next_power_of_2(n_cols)
        return dict(BLOCK_M=block_m, BLOCK_N=block_n, EVEN=n_cols == block_n, num_warps=warps), \
            triton.cdiv(n_rows, block_m)
    return config


POINTS = {(torch.float32, 16384): [(1, w) for w in (4, 8, 16, 32)], (torch.float32, 8192): [(1, w) for w in (4, 8, 16)],
          (torch.bfloat16, 512): [(bm, w) for bm in (4, 8, 16) for w in (1, 2, 4, 8)],
          (torch.bfloat16, 1024): [(bm, w) for bm in (2, 4, 8) for w in (2, 4, 8)],
          (torch.float32, 512): [(bm, w) for bm in (4, 8, 16) for w in (2, 4, 8)]}
if not ON_GPU:
    POINTS = {(torch.float32, 1000): [(1, 4)], (torch.bfloat16, 512): [(4, 2)]}
for (dtype, n), shapes in POINTS.items():
    m = TOTAL // n
    x = torch.randn(m, n, device=DEV, dtype=dtype)
    w, b = torch.rand(n, device=DEV, dtype=dtype) + 0.5, torch.randn(n, device=DEV, dtype=dtype)
    mean, rstd, y = torch.empty(m, device=DEV), torch.empty(m, device=DEV), torch.empty_like(x)
    row, ref = {"case": "02 forward", "dtype": str(dtype)[6:], "N": n, "copy": copy_gbs(x)}, None
    for tag, (kernel, cfg) in [("page", (fwd_plain, cfg_page)), ("page+last", (fwd_hint, cfg_page))] + \
            [(f"{bm}/{wp}{h}", (k, fixed(bm, wp))) for bm, wp in shapes for h, k in (("", fwd_plain), ("+last", fwd_hint))]:
        g_ln["layer_norm_fwd_kernel"], g_ln["_fwd_config"] = kernel, cfg
        got = timed(row, tag, lambda: g_ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5),
                    lambda: y.clone(), 2, x.numel() * x.element_size(), ref)
        ref = got if ref is None else ref
    g_ln["layer_norm_fwd_kernel"], g_ln["_fwd_config"] = fwd_plain, cfg_page
    print(json.dumps(row), flush=True)
    del x, y
