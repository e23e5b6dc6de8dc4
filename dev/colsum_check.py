"""Dev only: one GPU call that checks the column-sum change of tutorials/03_parallel_reduction.py (the split
rounded down) against the page before it ("old": the same tutorial with the column split rounded up, as it
was before; the run in dev/NOTES.md loaded a copy of the previous commit's tutorial, the same code):
sum_cols and sum_rows, bf16 and fp32, the page's five N (2^27 elements), 3 interleaved repeats, each timed as
the page times it (gpu_common.bench) next to an eager copy, results checked against float64. Also:
  - the first pass alone (no second pass) for the split bf16 cases: what the second pass costs;
  - which eviction hints Triton 3.6 emits for eviction_policy="evict_first" (PTX of dev/colsum_sweep2.cs_ptr);
  - N = 2^20 with one tile per program (a 128-byte strip, the whole column in one tile).

PYTHONUNBUFFERED=1 python3 dev/colsum_check.py
"""
import os
import re
import sys
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from colsum_sweep2 import ELEMENTS, NS, R, cs_ptr, launch, name  # noqa: E402
from gpu_common import bench, load, rel  # noqa: E402


ASM = {  # 32-bit loads with explicit cache operators (inline PTX; one word per instruction)
    "ld.global (control)": "ld.global.b32 $0, [$1];",
    "ld.global.cs": "ld.global.cs.b32 $0, [$1];",
    "ld.global.lu": "ld.global.lu.b32 $0, [$1];",
    "L2::cache_hint evict_first": "{ .reg .b64 pol; createpolicy.fractional.L2::evict_first.b64 pol, 1.0; "
                                  "ld.global.L2::cache_hint.b32 $0, [$1], pol; }",
}


@triton.jit
def cs_asm(x_ptr, out_ptr, n_cols, stride_mw, n_strips, tiles_per_seg, ASM: tl.constexpr, BF16: tl.constexpr,
           BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr):
    """Full tiles only (no masks): rows of BLOCK_W 32-bit words; bf16 pairs split with a shift and a mask."""
    j = tl.program_id(0) % n_strips
    s = tl.program_id(0) // n_strips
    w_ptr = x_ptr.to(tl.pointer_type(tl.int32))
    words = j * BLOCK_W + tl.arange(0, BLOCK_W)
    lo = tl.zeros([BLOCK_M, BLOCK_W], tl.float32)
    hi = tl.zeros([BLOCK_M, BLOCK_W], tl.float32)
    for t in tl.range(s * tiles_per_seg, (s + 1) * tiles_per_seg):
        rows = t * BLOCK_M + tl.arange(0, BLOCK_M)
        ptrs = w_ptr + rows.to(tl.int64)[:, None] * stride_mw + words[None, :]
        w = tl.inline_asm_elementwise(ASM, "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1)
        if BF16:
            lo += (w << 16).to(tl.float32, bitcast=True)
            hi += (w & -65536).to(tl.float32, bitcast=True)
        else:
            lo += w.to(tl.float32, bitcast=True)
    if BF16:
        out = out_ptr + s.to(tl.int64) * n_cols + 2 * words
        tl.store(out, tl.sum(lo, axis=0))
        tl.store(out + 1, tl.sum(hi, axis=0))
    else:
        tl.store(out_ptr + s.to(tl.int64) * n_cols + words, tl.sum(lo, axis=0))


def launch_asm(x, out, asm, sms):
    """16 KB tiles of 64 rows x 256 bytes, 4 warps, contiguous row ranges, split rounded down (4 per SM)."""
    n_rows, n_cols = x.shape
    bf16 = x.dtype == torch.bfloat16
    bw, bm = 64, 64
    words_per_row = n_cols // 2 if bf16 else n_cols
    assert x.is_contiguous() and words_per_row % bw == 0 and n_rows % bm == 0
    strips = words_per_row // bw
    tiles = n_rows // bm
    split = max(1, min(tiles // 4, 4 * sms // strips))
    while tiles % split:
        split -= 1
    target = out if split == 1 else torch.empty((split, n_cols), device=x.device, dtype=torch.float32)
    cs_asm[(strips * split,)](x, target, n_cols, words_per_row, strips, tiles // split, ASM=asm, BF16=bf16,
                              BLOCK_M=bm, BLOCK_W=bw, num_warps=4)
    if split > 1:
        torch.sum(target, 0, out=out)
    return split


def main():
    import pandas as pd

    T0 = time.time()
    OUT = os.environ.get("OUT", "/tmp")
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 40)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, "SMs", sms, flush=True)

    # which hints does evict_first become?
    x = torch.randn(512, 128, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(128, device="cuda", dtype=torch.float32)
    for st in (0, 2):
      try:
        k = cs_ptr[(1,)](x, out, 512, 128, 128, 1, 1, 1, 1, 8, 8, BLOCK_M=64, BLOCK_N=128, STAGES=st,
                         INTERLEAVE=0, EVICT=True, num_warps=4)
        ptx = k.asm["ptx"]
        forms = set()
        for ln in ptx.splitlines():
            ln = re.sub(r"^@!?%p\d+\s+", "", ln.strip())
            if ln.startswith(("ld.global", "cp.async", "createpolicy")):
                forms.add(ln.split()[0])
        forms = sorted(forms)
        print(f"evict_first, STAGES={st}: {forms}", flush=True)
      except Exception as e:  # noqa: BLE001
        print("PTX check failed:", type(e).__name__, str(e)[:200], flush=True)

    new = load("tutorials/03_parallel_reduction.py")
    path = "tutorials/03_parallel_reduction.py"
    src = open(path).read()
    call = "split, per_split = choose_split(n_strips, n_rows, block_m)"
    assert call in src, "sum_cols no longer calls choose_split as this script expects"
    src = src.replace(call, call[:-1] + ", round_up=True)")
    old = {"__name__": "dev_03_old"}
    exec(compile(src[: src.index("# %%\n# Correctness")], os.path.abspath(path), "exec"), old)
    torch.cuda.set_stream(torch.cuda.Stream())
    recs, extra = [], []
    for dtype in (torch.bfloat16, torch.float32):
        label = str(dtype)[6:]
        for n in NS:
            x = torch.randn((ELEMENTS // n, n), device="cuda", dtype=dtype)
            nb = x.numel() * x.element_size()
            ref_c, ref_r = x.double().sum(0), x.double().sum(1)
            outs = {}
            for which, tut in (("old", old), ("new", new)):
                oc = torch.empty(n, device="cuda", dtype=dtype)
                orow = torch.empty(x.shape[0], device="cuda", dtype=dtype)
                cfg_c = tut["sum_cols"](x, oc)
                cfg_r = tut["sum_rows"](x, orow)
                outs[which] = (tut, oc, orow, cfg_c, cfg_r, rel(oc, ref_c), rel(orow, ref_r))
            same = torch.equal(outs["old"][1], outs["new"][1])
            cp = torch.empty_like(x)
            for rep in range(3):
                light = 2 * nb / bench(lambda: cp.copy_(x), graph=False) * 1e-6
                for which, (tut, oc, orow, cfg_c, cfg_r, err_c, err_r) in outs.items():
                    g = nb / bench(lambda: tut["sum_cols"](x, oc)) * 1e-6
                    recs.append({"dtype": label, "N": n, "rep": rep, "sum": "cols", "page": which, "%": 100 * g / light,
                                 "GB/s": g, "light": light, "split": cfg_c["SPLIT"], "err": err_c, "same bits": int(same)})
                    if rep < 2:
                        g = nb / bench(lambda: tut["sum_rows"](x, orow)) * 1e-6
                        recs.append({"dtype": label, "N": n, "rep": rep, "sum": "rows", "page": which,
                                     "%": 100 * g / light, "GB/s": g, "light": light, "split": cfg_r["SPLIT"],
                                     "err": err_r, "same bits": -1})
            # the first pass alone (new page's kernel and grid, partials left in a buffer)
            if dtype == torch.bfloat16 and n <= 4096:
                bm, bn, w = new["tile_config"](*x.shape, dtype, "cols")
                strips = triton.cdiv(n, bn)
                split, per = new["choose_split"](strips, x.shape[0], bm)
                part = torch.empty((split, n), device="cuda", dtype=torch.float32)

                def first():
                    new["col_sum_kernel"][(strips, split)](x, part, x.shape[0], n, x.stride(0), x.stride(1), per,
                                                           BLOCK_M=bm, BLOCK_N=bn, num_warps=w)
                if n == 4096:
                    k = new["col_sum_kernel"][(strips, split)](x, part, x.shape[0], n, x.stride(0), x.stride(1), per,
                                                               BLOCK_M=bm, BLOCK_N=bn, num_warps=w)
                    fs = sorted({re.sub(r"^@!?%p\d+\s+", "", ln.strip()).split()[0] for ln in k.asm["ptx"].splitlines()
                                 if "ld.global" in ln or "cp.async" in ln})
                    print("page's col_sum_kernel, bf16 N=4096, loads:", fs, flush=True)
                g = nb / bench(first) * 1e-6
                extra.append({"dtype": label, "N": n, "what": f"first pass alone (split {split})", "%": 100 * g / light})
            if n in (4096, 65536):
                o = torch.empty(n, device="cuda", dtype=torch.float32)
                cands = {f"asm {k}": (lambda a=a: launch_asm(x, o, a, sms)) for k, a in ASM.items()}
                for ev in (False, True):
                    r = R("ptr", 16, 256, 4, 0, 0, 0, ev=ev, rule="floor")
                    cands["tl.load, no num_stages" + (", evict_first" if ev else "")] = lambda r=r: launch(x, o, r, sms)
                for what, fn in cands.items():
                    try:
                        o.fill_(float("nan"))
                        fn()
                        err = rel(o, ref_c)
                        g = nb / bench(fn) * 1e-6
                        extra.append({"dtype": label, "N": n, "what": f"{what} (err {err:.1e})", "%": 100 * g / light})
                    except Exception as e:  # noqa: BLE001
                        print("  skip", what, type(e).__name__, str(e)[:200], flush=True)
            if n == 2**20:
                o = torch.empty(n, device="cuda", dtype=torch.float32)
                for r in (R("ptr", 16, 128, 4, 0, 0, 0), R("ptr", 16, 128, 4, 2, 0, 0), R("ptr", 8, 128, 4, 0, 0, 0)):
                    launch(x, o, r, sms)
                    err = rel(o, ref_c)
                    g = nb / bench(lambda: launch(x, o, r, sms)) * 1e-6
                    extra.append({"dtype": label, "N": n, "what": name(r) + f" (err {err:.1e})", "%": 100 * g / light})
            del x, cp, outs, ref_c, ref_r
            torch.cuda.empty_cache()
        print(f"{label} done at {time.time() - T0:.0f}s", flush=True)
    df = pd.DataFrame(recs)
    df.to_csv(os.path.join(OUT, "colsum_check.csv"), index=False)
    p = df.pivot_table(index=["sum", "dtype", "page"], columns="N", values="%", aggfunc="median")
    p["worst"] = p.min(axis=1)
    print("\n== % of the copy, median of the repeats (cols 3, rows 2)\n" + p.round(1).to_string(), flush=True)
    sp = df.pivot_table(index=["sum", "dtype", "page"], columns="N", values="%", aggfunc=lambda s: s.max() - s.min())
    print("spread max-min:\n" + sp.round(1).to_string(), flush=True)
    print("GB/s:\n" + df.pivot_table(index=["sum", "dtype", "page"], columns="N", values="GB/s",
                                     aggfunc="median").round(0).to_string(), flush=True)
    print("copy GB/s:\n" + df.pivot_table(index="dtype", columns="N", values="light", aggfunc="median").round(0).to_string())
    print("SPLIT:\n" + df.pivot_table(index=["sum", "dtype", "page"], columns="N", values="split", aggfunc="first").to_string())
    print("max rel err vs float64:\n" + df.pivot_table(index=["sum", "dtype", "page"], columns="N", values="err",
                                                       aggfunc="max").to_string(float_format=lambda f: f"{f:.1e}"))
    print("cols: old and new results bitwise equal:\n" + df[df["sum"] == "cols"].pivot_table(
        index="dtype", columns="N", values="same bits", aggfunc="first").to_string())
    if extra:
        print("\n== side measurements\n" + pd.DataFrame(extra).round(1).to_string(index=False))
    print(f"total {time.time() - T0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
