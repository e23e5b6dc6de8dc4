"""Dev only: layer norm forward, bf16 N = 32768: does an L1-heavy shared-memory carveout keep w and b in
L1? The fused kernel loads x past L1 (.cg) and w, b through it, once per row: 128 KB of w and b per row
from L2 when they miss. The carveout (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, set with
cuFuncSetAttribute on the compiled kernels) is 0 = as much L1 as possible, 100 = as much shared memory,
-1 = the driver's default. Kernel-only, graph-timed, % of an eager copy, through the page's launcher.

PYTHONUNBUFFERED=1 python3 dev/ln_carveout_gpu.py
"""
import ctypes

import torch
import triton
from gpu_common import load, bench, rel

torch.cuda.set_stream(torch.cuda.Stream())
ln = load("tutorials/02_layer_norm.py")
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)
cuda = ctypes.CDLL("libcuda.so.1")
CARVEOUT = 9  # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT


def set_carveout(jit_fn, value):
    n = 0
    for cache in jit_fn.device_caches.values():
        for k in cache[0].values():
            k._init_handles()
            rc = cuda.cuFuncSetAttribute(ctypes.c_void_p(k.function), CARVEOUT, ctypes.c_int(value))
            assert rc == 0, rc
            n += 1
    return n


for dtype, n in [(torch.bfloat16, 32768), (torch.bfloat16, 16384), (torch.float32, 32768)]:
    m = 2 ** 26 // n
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    out = torch.empty_like(x)
    mean = torch.empty(m, device="cuda")
    rstd = torch.empty(m, device="cuda")
    ref = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double())
    for reload in (False, True):
        fn = lambda r=reload: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5, reload=r)
        fn()
        line = []
        for value in (-1, 0, 50, 100, -1):
            set_carveout(ln["layer_norm_fwd_kernel"], value)
            set_carveout(ln["layer_norm_fwd_twice_kernel"], value)
            y.fill_(float("nan"))
            copy_ms = bench(lambda: out.copy_(x), graph=False)
            fn()
            torch.cuda.synchronize()
            err = rel(y, ref)
            pcts = [copy_ms / bench(fn) * 100 for _ in range(2)]
            line.append(f"carveout {value}: {pcts[0]:.1f} {pcts[1]:.1f} (err {err:.0e})")
        print(f"{dtype} {n} reload={reload}: " + " | ".join(line), flush=True)
    del x, y, out, ref
    torch.cuda.empty_cache()
