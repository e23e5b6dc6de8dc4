"""Dev only: the pages' staged (Gluon) forwards, softmax (tutorial 01) and layer norm (02), on a GPU.
1. Correctness against float64, NaN-poisoned outputs, 16-bit rows of several widths, aligned and not
   (unaligned rows must fall back to the other kernels), special values for softmax (as torch does).
2. Speed, kernel-only, CUDA-graph timed like the pages, % of an eager copy of the same tensor: the
   pages' STAGED entries and variants (CHUNK_N, warps, PER_SM), against the launchers without staging.

PYTHONUNBUFFERED=1 python3 dev/staged_check_gpu.py
"""
import time

import torch
import triton
from gpu_common import load, bench, rel

T0 = time.time()
torch.cuda.set_stream(torch.cuda.Stream())
sm = load("tutorials/01_fused_softmax.py")
ln = load("tutorials/02_layer_norm.py")
print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, flush=True)

# 1. correctness
bad = 0
for dtype in (torch.bfloat16, torch.float16):
    for n, stride in [(16385, 16400), (16400, 16400), (20000, 20000), (24576, 24576), (32767, 32767), (32767, 32768), (32768, 32768),
                      (16384, 16384)]:
        m = 300
        base = torch.randn(m, stride, device="cuda", dtype=dtype) * 4 + 1
        x = base[:, :n]
        y = torch.full_like(x, float("nan"))
        staged_sm = sm["staged_plan"](x) is not None
        sm["softmax_rows_forward"](x, y)
        e_sm = rel(y, torch.softmax(x.double(), -1))
        w = torch.randn(n, device="cuda", dtype=dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        y2 = torch.full_like(x, float("nan"))
        mean = torch.full((m,), float("nan"), device="cuda")
        rstd = torch.full((m,), float("nan"), device="cuda")
        staged_ln = ln["fwd_staged_plan"](x, {}) is not None
        ln["layer_norm_rows_forward"](x, y2, w, b, mean, rstd, 1e-5)
        xd = x.double()
        e_ln = rel(y2, torch.nn.functional.layer_norm(xd, (n,), w.double(), b.double(), eps=1e-5))
        e_mean = rel(mean, xd.mean(-1))
        e_rstd = rel(rstd, 1 / torch.sqrt(xd.var(-1, unbiased=False) + 1e-5))
        # no weight / no bias
        y3 = torch.full_like(x, float("nan"))
        ln["layer_norm_rows_forward"](x, y3, None, b, mean, rstd, 1e-5)
        e_ln_nw = rel(y3, torch.nn.functional.layer_norm(xd, (n,), None, b.double(), eps=1e-5))
        ln["layer_norm_rows_forward"](x, y3, w, None, mean, rstd, 1e-5)
        e_ln_nb = rel(y3, torch.nn.functional.layer_norm(xd, (n,), w.double(), None, eps=1e-5))
        tol = 1e-2
        ok = all(e < tol for e in (e_sm, e_ln, e_mean, e_rstd, e_ln_nw, e_ln_nb))
        bad += not ok
        print(f"{str(dtype)[6:]} N {n} stride {stride}: staged softmax {staged_sm} LN {staged_ln} | softmax {e_sm:.1e} "
              f"LN {e_ln:.1e} mean {e_mean:.1e} rstd {e_rstd:.1e} no-w {e_ln_nw:.1e} no-b {e_ln_nb:.1e} "
              f"{'ok' if ok else 'FAIL'}", flush=True)
# special values, softmax, against torch on the same inputs (NaN where torch has NaN)
n = 32768
x = torch.randn(8, n, device="cuda", dtype=torch.bfloat16)
x[0] = -float("inf")
x[1, 5] = float("nan")
x[2, 7] = float("inf")
x[3, : n // 2] = -float("inf")
x[4, -1] = float("inf")
x[5, :3] = -float("inf")
assert sm["staged_plan"](x) is not None
y = torch.full_like(x, 7.0)
sm["softmax_rows_forward"](x, y)
ref = torch.softmax(x.float(), -1)
same_nan = torch.equal(torch.isnan(y), torch.isnan(ref))
close = torch.allclose(torch.nan_to_num(y.float(), 0.0), torch.nan_to_num(ref, 0.0), atol=1e-2, rtol=1e-2)
bad += not (same_nan and close)
print(f"special rows: NaN pattern as torch {same_nan}, values close {close}", flush=True)
# determinism: staged kernels give the same bits every run
x = torch.randn(2048, n, device="cuda", dtype=torch.bfloat16)
w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
outs_sm, outs_ln = set(), set()
for _ in range(5):
    y = torch.empty_like(x)
    sm["softmax_rows_forward"](x, y)
    outs_sm.add(hash(y.view(torch.int16).cpu().numpy().tobytes()))
    mean = torch.empty(2048, device="cuda")
    rstd = torch.empty(2048, device="cuda")
    ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)
    outs_ln.add(hash(y.view(torch.int16).cpu().numpy().tobytes()))
print(f"5 runs: softmax {len(outs_sm)} distinct, LN {len(outs_ln)} distinct; checks failed: {bad}; t={time.time() - T0:.0f}s",
      flush=True)

# 2. speed
def cfgs(base):
    out = {"page": None}
    for chunk, warps, per_sm in [(8192, 8, 3), (16384, 16, 3), (4096, 16, 3), (8192, 16, 2), (4096, 8, 3),
                                 (16384, 32, 2)]:
        out[f"{chunk}w{warps}x{per_sm}"] = {2: dict(base, CHUNK_N=chunk, num_warps=warps, PER_SM=per_sm)}
    return out


def row_speed(dtype, n, configs, force=None):
    m = 2 ** 26 // n
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    y, out = torch.empty_like(x), torch.empty_like(x)
    mean = torch.empty(m, device="cuda")
    rstd = torch.empty(m, device="cuda")
    copy_ms = bench(lambda: out.copy_(x), graph=False)
    line = [f"{str(dtype)[6:]} N {n}: copy {2 * x.numel() * x.element_size() / copy_ms * 1e-6:.0f}"]
    for name, st in configs.items():
        st = force if (st is None and force) else st
        try:
            a = copy_ms / bench(lambda: sm["softmax_rows_forward"](x, y, staged=st)) * 100
            c = copy_ms / bench(lambda: ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5, staged=st)) * 100
            line.append(f"{name} sm {a:.1f} ln {c:.1f}")
        except Exception as e:
            line.append(f"{name} FAILED {type(e).__name__} {str(e)[:120]}")
    print(" | ".join(line), flush=True)


base = dict(sm["STAGED"][2])
for rnd in range(2):
    print(f"round {rnd} t={time.time() - T0:.0f}s", flush=True)
    row_speed(torch.bfloat16, 32768, dict(cfgs(dict(base, MIN_N=1)), without={}))
    row_speed(torch.float16, 32768, {"page": None, "without": {}})
    row_speed(torch.bfloat16, 24576, {"page": None, "without": {}})
    row_speed(torch.bfloat16, 20000, {"page": None, "without": {}})
    row_speed(torch.bfloat16, 16384, {"forced": {2: dict(base, MIN_N=1)}, "without": {}})
    fp32 = {4: dict(base, MIN_N=1, MAX_N=32768)}
    row_speed(torch.float32, 16384, {"fp32 staged": fp32, "without": {}})
    row_speed(torch.float32, 32768, {"fp32 staged 1/SM": {4: dict(fp32[4], PER_SM=1)}, "without": {}})
    row_speed(torch.bfloat16, 65536, {"staged 1/SM": {2: dict(base, MAX_N=65536, PER_SM=1)}, "without": {}})
print(f"done t={time.time() - T0:.0f}s", flush=True)
