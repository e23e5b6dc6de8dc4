"""Two leads at in-range points where Helion runs faster than ours on an H200 (one GPU run, about 1 min):
06's loss alone at fp32 V = 50,304 (0.967x Helion), where 10,672 rows fall on 4,224 programs (2.53 rows each) and the
kernel's 64 registers a thread let 16 of its 32 planned programs an SM run at once (ncu: 2.0 waves), so a last round
runs a few programs alone; and 01's forward at bf16 N = 512 (0.976x), where Helion's config is 2 rows at 1 warp and
ours 4 rows at 4 warps (compiled for sm_90: 38 registers a thread, 12 programs an SM where the model plans 16). do_bench median, L2 flushed, the pages' sizes, GB/s as each page counts it, each variant
checked against the page's own launch.
From the repository root: python3 probe/next74.py (no GPU: a small functional run through Triton's interpreter)."""
import json, os, sys

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
import triton  # noqa: E402

sys.path.insert(0, "tests")
from conftest import load_tutorial  # noqa: E402

ON_GPU = torch.cuda.is_available()
DEV = "cuda" if ON_GPU else "cpu"
ms = (lambda fn: triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")) if ON_GPU else None
rows_out = []
ROUNDS = int(os.environ.get("ROUNDS", "1"))  # each variant timed in ROUNDS interleaved rounds: the median shown


def copy_gbs(x):  # a copy's GB/s (it reads and writes x's bytes): the yardstick beside the variants
    out = torch.empty_like(x)
    return round(2 * x.numel() * x.element_size() / ms(lambda: out.copy_(x)) * 1e-6) if ON_GPU else "-"


def gbs(nbytes, run):
    return round(nbytes / ms(run) * 1e-6) if ON_GPU else "ok"


# ---- 06: the loss alone, the grid
ce = load_tutorial("06_cross_entropy")
g = ce["loss_rows"].__globals__
kernel, config = g["loss_kernel"], g["loss_config"]
props = torch.cuda.get_device_properties(DEV) if ON_GPU else None
REGS = getattr(props, "regs_per_multiprocessor", 65536) if ON_GPU else 65536
SMS, SMEM, WARPS = g["NUM_SMS"], g["SMEM_PER_SM"], g["WARPS_PER_SM"]


def resident(meta, x, t, out):  # programs an SM can hold: threads, registers (256 a warp at a time), 32 blocks
    if not ON_GPU:
        return WARPS // meta["num_warps"], 0
    compiled = kernel.warmup(x, t, out, *x.shape, x.stride(0), grid=(1,), **meta)
    regs_warp = triton.cdiv(max(compiled.n_regs, 1) * 32, 256) * 256
    return min(WARPS // meta["num_warps"], REGS // (regs_warp * meta["num_warps"]), 32), compiled.n_regs


def launch(x, t, out, meta, grid):
    kernel[(grid,)](x, t, out, *x.shape, x.stride(0), **meta)


for dtype, total in ((torch.float32, 2**29), (torch.bfloat16, 2**30)) if ON_GPU else ((torch.float32, 2**12),):
    for v in [32000, 50304, 128256, 151936, 262144] if ON_GPU else [1000]:
        x = torch.randn(total // v, v, device=DEV, dtype=dtype)
        t = torch.randint(0, v, (len(x),), device=DEV)
        out, ref = torch.empty(len(x), device=DEV), torch.empty(len(x), device=DEV)
        meta, grid = config(*x.shape, x.element_size())
        launch(x, t, ref, meta, grid)
        per_sm, n_regs = resident(meta, x, t, out)
        slots = grid  # the page's: min(M, programs its threads hold x SMs)
        balanced = triton.cdiv(len(x), triton.cdiv(len(x), slots))  # as many rows each
        held = per_sm * SMS
        stages_held = min(3, 1 + SMEM // (per_sm * meta["CHUNK"] * x.element_size()))
        row = {"case": "06 loss", "dtype": str(dtype)[6:], "V": v, "M": len(x), "n_regs": n_regs, "per_sm": per_sm,
               "page grid": grid, "STAGES": meta["STAGES"], "copy": copy_gbs(x)}
        variants = {
            "page": (meta, grid),
            f"balanced {balanced}": (meta, balanced),
            f"held {min(len(x), held)}": (meta, min(len(x), held)),
            f"held balanced {triton.cdiv(len(x), triton.cdiv(len(x), held))}": (meta, triton.cdiv(len(x), triton.cdiv(len(x), held))),
            f"held balanced, {stages_held} stages": (meta | dict(STAGES=stages_held), triton.cdiv(len(x), triton.cdiv(len(x), held))),
            f"a row a program {len(x)}": (meta, len(x)),  # the finest split: a slot takes the next row as one ends
            f"2x held {min(len(x), 2 * held)}": (meta, min(len(x), 2 * held)),
            f"4x held {min(len(x), 4 * held)}": (meta, min(len(x), 4 * held)),
        }
        for tag, (m, gr) in variants.items():
            try:
                launch(x, t, out, m, gr)
                torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
                row[tag] = []
            except Exception as e:  # noqa: BLE001
                row[tag] = f"error: {type(e).__name__}: {str(e)[:160]}"
        for _ in range(ROUNDS):
            for tag, (m, gr) in variants.items():
                if isinstance(row[tag], list):
                    row[tag].append(gbs(x.numel() * x.element_size(), lambda m=m, gr=gr: launch(x, t, out, m, gr)))
        row |= {k: sorted(v)[len(v) // 2] for k, v in row.items() if isinstance(v, list)}
        rows_out.append(row)
        print(json.dumps(row), flush=True)
        del x, t, out, ref

# ---- 01: the forward's short rows, rows a program and warps
sm = load_tutorial("01_fused_softmax")
g1 = sm["softmax_rows_forward"].__globals__
k1, cfg1 = g1["softmax_fwd_kernel"], g1["_fused_config"]
for dtype in (torch.bfloat16, torch.float32):
    for n in [256, 512, 1024, 2048] if ON_GPU else [512]:
        x = torch.randn((2**26 if ON_GPU else 2**12) // n, n, device=DEV, dtype=dtype)
        y, ref = torch.empty_like(x), torch.empty_like(x)
        g1["softmax_rows_forward"](x, ref)
        block_m, block_n, warps = cfg1(n, x.element_size())
        row = {"case": "01 forward", "dtype": str(dtype)[6:], "N": n, "page": f"{block_m} x {block_n}, {warps} warps",
               "copy": copy_gbs(x)}
        # the page's launch also with its registers capped so that 16 programs of 4 warps fit an SM (sm_90, Triton
        # 3.8: bf16 512 compiles to 38 registers a thread, 12 programs an SM; 256 and 1,024 to 32, 16 programs)
        cap = 65536 // (16 * 32 * warps) // 8 * 8
        variants = [(bm, w, None) for bm, w in sorted({(block_m, warps), (1, 1), (2, 1), (4, 1), (2, 2), (4, 2),
                                                        (8, 2), (8, 4), (2, 4)})] + [(block_m, warps, cap)]
        runs = {}
        for bm, w, regs in variants:
            extra = {"maxnreg": regs} if regs and ON_GPU else {}
            run = lambda bm=bm, w=w, extra=extra: k1[(triton.cdiv(len(x), bm),)](
                x, y, *x.shape, x.stride(0), y.stride(0), BLOCK_M=bm, BLOCK_N=block_n, num_warps=w, **extra)
            tag = f"{bm} rows, {w} warps" + (f", maxnreg {regs}" if regs else "")
            try:
                run()
                torch.testing.assert_close(y, ref)
                row[tag], runs[tag] = [], run
            except Exception as e:  # noqa: BLE001
                row[tag] = f"error: {type(e).__name__}: {str(e)[:120]}"
        for _ in range(ROUNDS):
            for tag, run in runs.items():
                row[tag].append(gbs(2 * x.numel() * x.element_size(), run))
        row |= {k: sorted(v)[len(v) // 2] for k, v in row.items() if isinstance(v, list)}
        rows_out.append(row)
        print(json.dumps(row), flush=True)

if os.environ.get("OUT"):
    pathlib_out = os.path.join(os.environ["OUT"], "next74.json")
    with open(pathlib_out, "w") as f:
        json.dump(rows_out, f, indent=1)
