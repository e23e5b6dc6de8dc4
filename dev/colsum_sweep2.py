"""Dev only: one GPU call that sweeps column-sum (dim=0) kernels for tutorials/03_parallel_reduction.py, bf16
and fp32, at the page's five N (2^27 elements), each timed as the page times it (gpu_common.bench: a CUDA
graph of one call replayed under do_bench, whose L2 flush zeroes 256 MB), next to an eager copy of the same
tensor (the speed of light, 2 * bytes / time), every result checked against float64.

Kernels (one launcher, `launch`):
  ptr   pointer loads of [BLOCK_M, BLOCK_N] tiles (the page's kernel, generalised)
  pack  bf16 loaded as int32 words (two columns each), split with a shift and a mask
  tma   Hopper tensor descriptors (TensorDescriptor, host side): TMA copies into shared memory
Options: STAGES (tl.range num_stages; 0 = not given, no pipelining), interleaved row tiles (program s of a
strip walks tiles s, s + S, ...: all programs move down the matrix together) or contiguous row ranges (the
page), a persistent grid (P programs per SM, each walking whole segments) or one program per segment,
evict_first loads. The grid's split S: "ceil" as the page (cdiv(P * SMs, strips)) or "floor".

PYTHONUNBUFFERED=1 python3 dev/colsum_sweep2.py      (BUDGET=seconds for the timing phases)
"""
import multiprocessing as mp
import os
import sys
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_common import bench, rel  # noqa: E402

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover
    TensorDescriptor = None

ELEMENTS = 2**27
NS = [16, 256, 4096, 65536, 2**20]
MIN_STEPS = 4


@triton.jit
def _ld(ptrs, mask, EVICT: tl.constexpr):
    if EVICT:
        return tl.load(ptrs, mask=mask, other=0, eviction_policy="evict_first")
    else:
        return tl.load(ptrs, mask=mask, other=0)


@triton.jit
def cs_ptr(x_ptr, out_ptr, n_rows, n_cols, stride_m, stride_n, n_strips, n_segs, split, tiles_per_seg,
           n_row_tiles, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr,
           INTERLEAVE: tl.constexpr, EVICT: tl.constexpr):
    pid = tl.program_id(0)
    for seg in tl.range(pid, n_segs, tl.num_programs(0)):
        j = seg % n_strips
        s = seg // n_strips
        if INTERLEAVE:
            t0 = s
            t1 = n_row_tiles
            dt = split
        else:
            t0 = s * tiles_per_seg
            t1 = tl.minimum(t0 + tiles_per_seg, n_row_tiles)
            dt = 1
        cols = j * BLOCK_N + tl.arange(0, BLOCK_N)
        col_ok = cols < n_cols
        col_offs = cols.to(tl.int64) * stride_n
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        if STAGES == 0:
            for t in tl.range(t0, t1, dt):
                rows = t * BLOCK_M + tl.arange(0, BLOCK_M)
                x = _ld(x_ptr + rows.to(tl.int64)[:, None] * stride_m + col_offs[None, :],
                        (rows < n_rows)[:, None] & col_ok[None, :], EVICT)
                acc += x.to(tl.float32)
        else:
            for t in tl.range(t0, t1, dt, num_stages=STAGES):
                rows = t * BLOCK_M + tl.arange(0, BLOCK_M)
                x = _ld(x_ptr + rows.to(tl.int64)[:, None] * stride_m + col_offs[None, :],
                        (rows < n_rows)[:, None] & col_ok[None, :], EVICT)
                acc += x.to(tl.float32)
        tl.store(out_ptr + s.to(tl.int64) * n_cols + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty),
                 mask=col_ok)


@triton.jit
def cs_pack(x_ptr, out_ptr, n_rows, n_cols, stride_mw, n_strips, n_segs, split, tiles_per_seg,
            n_row_tiles, BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr, STAGES: tl.constexpr,
            INTERLEAVE: tl.constexpr, EVICT: tl.constexpr):
    """bf16 only: contiguous rows of even length, even row stride; words = pairs of columns."""
    pid = tl.program_id(0)
    w_ptr = x_ptr.to(tl.pointer_type(tl.int32))
    for seg in tl.range(pid, n_segs, tl.num_programs(0)):
        j = seg % n_strips
        s = seg // n_strips
        if INTERLEAVE:
            t0 = s
            t1 = n_row_tiles
            dt = split
        else:
            t0 = s * tiles_per_seg
            t1 = tl.minimum(t0 + tiles_per_seg, n_row_tiles)
            dt = 1
        words = j * BLOCK_W + tl.arange(0, BLOCK_W)
        w_ok = 2 * words < n_cols
        lo = tl.zeros([BLOCK_M, BLOCK_W], tl.float32)
        hi = tl.zeros([BLOCK_M, BLOCK_W], tl.float32)
        if STAGES == 0:
            for t in tl.range(t0, t1, dt):
                rows = t * BLOCK_M + tl.arange(0, BLOCK_M)
                w = _ld(w_ptr + rows.to(tl.int64)[:, None] * stride_mw + words[None, :],
                        (rows < n_rows)[:, None] & w_ok[None, :], EVICT)
                lo += (w << 16).to(tl.float32, bitcast=True)
                hi += (w & -65536).to(tl.float32, bitcast=True)
        else:
            for t in tl.range(t0, t1, dt, num_stages=STAGES):
                rows = t * BLOCK_M + tl.arange(0, BLOCK_M)
                w = _ld(w_ptr + rows.to(tl.int64)[:, None] * stride_mw + words[None, :],
                        (rows < n_rows)[:, None] & w_ok[None, :], EVICT)
                lo += (w << 16).to(tl.float32, bitcast=True)
                hi += (w & -65536).to(tl.float32, bitcast=True)
        out = out_ptr + s.to(tl.int64) * n_cols + 2 * words
        tl.store(out, tl.sum(lo, axis=0).to(out_ptr.dtype.element_ty), mask=w_ok)
        tl.store(out + 1, tl.sum(hi, axis=0).to(out_ptr.dtype.element_ty), mask=2 * words + 1 < n_cols)


@triton.jit
def cs_tma(desc, out_ptr, n_cols, n_strips, n_segs, split, tiles_per_seg, n_row_tiles,
           BLOCK_M: tl.constexpr, BOX_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr,
           INTERLEAVE: tl.constexpr):
    """TMA loads of [BOX_M, BLOCK_N] boxes (BLOCK_M // BOX_M per step); out-of-range elements read as 0."""
    pid = tl.program_id(0)
    for seg in tl.range(pid, n_segs, tl.num_programs(0)):
        j = seg % n_strips
        s = seg // n_strips
        if INTERLEAVE:
            t0 = s
            t1 = n_row_tiles
            dt = split
        else:
            t0 = s * tiles_per_seg
            t1 = tl.minimum(t0 + tiles_per_seg, n_row_tiles)
            dt = 1
        acc = tl.zeros([BOX_M, BLOCK_N], tl.float32)
        if STAGES == 0:
            for t in tl.range(t0, t1, dt):
                for k in tl.static_range(BLOCK_M // BOX_M):
                    acc += desc.load([t * BLOCK_M + k * BOX_M, j * BLOCK_N]).to(tl.float32)
        else:
            for t in tl.range(t0, t1, dt, num_stages=STAGES):
                for k in tl.static_range(BLOCK_M // BOX_M):
                    acc += desc.load([t * BLOCK_M + k * BOX_M, j * BLOCK_N]).to(tl.float32)
        cols = j * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(out_ptr + s.to(tl.int64) * n_cols + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty),
                 mask=cols < n_cols)


# rule: (kind, tile bytes, strip bytes, bf16 warps, stages, interleave, persistent, P, evict, split rule)
def R(kind, tile_kb, strip, w, st, il, pers, p=4, ev=False, rule="ceil"):
    return (kind, tile_kb * 1024, strip, w, st, il, pers, p, ev, rule)


RULES = [R("ptr", 16, 256, 4, 2, 0, 0)]  # = the page's kernel and grid (a check of the harness)
for st in (2, 3, 4):
    for il in (0, 1):
        for pers in (0, 1):
            if (st, il, pers) != (2, 0, 0):
                RULES.append(R("ptr", 16, 256, 4, st, il, pers))
RULES += [R("ptr", 16, 256, 4, 3, 1, 1, p=2), R("ptr", 16, 256, 4, 3, 1, 1, p=8), R("ptr", 16, 256, 4, 3, 1, 0, p=8),
          R("ptr", 16, 256, 4, 2, 0, 0, rule="floor"), R("ptr", 16, 256, 4, 3, 1, 0, rule="floor"),
          R("ptr", 16, 256, 4, 2, 0, 0, ev=True), R("ptr", 16, 256, 4, 2, 1, 1, ev=True),
          R("ptr", 16, 256, 4, 3, 1, 1, ev=True), R("ptr", 16, 256, 4, 0, 1, 1, ev=True)]
for tile_kb, strip, w in ((32, 256, 8), (16, 512, 4), (32, 512, 8), (16, 1024, 4), (32, 1024, 8), (16, 128, 4),
                          (32, 256, 4), (8, 256, 4)):
    RULES.append(R("ptr", tile_kb, strip, w, 3, 1, 1))
RULES += [R("ptr", 16, 256, 16, 0, 1, 1), R("ptr", 8, 256, 16, 0, 1, 1), R("ptr", 8, 256, 16, 0, 1, 1, p=8),
          R("ptr", 16, 256, 16, 2, 1, 1), R("ptr", 16, 256, 8, 0, 1, 1, p=8)]
for st in (2, 3):
    for pers in (0, 1):
        RULES.append(R("pack", 16, 256, 4, st, 1, pers))
RULES += [R("pack", 16, 256, 4, 2, 0, 0), R("pack", 16, 256, 16, 0, 1, 1), R("pack", 32, 512, 8, 3, 1, 1),
          R("pack", 16, 512, 4, 3, 1, 1), R("pack", 16, 256, 4, 3, 1, 1, ev=True)]
for st in (2, 3, 4):
    for pers in (0, 1):
        RULES.append(R("tma", 16, 256, 4, st, 1, pers))
RULES += [R("tma", 32, 512, 8, 3, 1, 1), R("tma", 16, 512, 4, 3, 1, 1), R("tma", 8, 256, 4, 4, 1, 1),
          R("tma", 16, 256, 4, 3, 0, 1), R("tma", 32, 256, 4, 3, 1, 1), R("tma", 16, 128, 4, 4, 1, 1),
          R("tma", 16, 256, 4, 3, 1, 1, p=2), R("tma", 16, 256, 4, 0, 1, 1, p=8)]


def name(r):
    kind, tile, strip, w, st, il, pers, p, ev, rule = r
    return (f"{kind} {tile // 1024}K/{strip}B w{w} st{st} {'il' if il else 'ct'} {'P' if pers else 'G'}{p}"
            + (" ev" if ev else "") + (" floor" if rule == "floor" else ""))


def rules_for(dtype):
    if dtype == torch.float32:  # no packing; fp32 keeps the page's 64 B per thread: twice the warps
        return [r for r in RULES if r[0] != "pack"]
    return RULES


def num_sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


def launch(x, out, r, sms):
    """Sum the columns of x (M x N) into out (fp32, N) with rule r; returns the split."""
    kind, tile, strip, w, st, il, pers, p, ev, rule = r
    n_rows, n_cols = x.shape
    es = x.element_size()
    if es == 4 and w < 16:
        w = 2 * w
    bn = min(triton.next_power_of_2(n_cols), strip // es)
    bm = max(1, min(tile // es // bn, triton.next_power_of_2(n_rows)))
    n_strips = triton.cdiv(n_cols, bn)
    n_row_tiles = triton.cdiv(n_rows, bm)
    most = max(1, n_row_tiles // MIN_STEPS)
    if rule == "floor" or pers:
        wanted = max(1, (p * sms) // n_strips)
    else:
        wanted = triton.cdiv(p * sms, n_strips)
    split = max(1, min(most, wanted, 65535))
    per = triton.cdiv(n_row_tiles, split)
    if not il:
        split = triton.cdiv(n_row_tiles, per)
    n_segs = n_strips * split
    grid = min(n_segs, p * sms) if pers else n_segs
    target = out if split == 1 else torch.empty((split, n_cols), device=x.device, dtype=torch.float32)
    if kind == "ptr":
        cs_ptr[(grid,)](x, target, n_rows, n_cols, x.stride(0), x.stride(1), n_strips, n_segs, split, per,
                        n_row_tiles, BLOCK_M=bm, BLOCK_N=bn, STAGES=st, INTERLEAVE=il, EVICT=ev, num_warps=w)
    elif kind == "pack":
        assert x.stride(1) == 1 and x.stride(0) % 2 == 0 and n_cols % 2 == 0 and x.data_ptr() % 4 == 0
        cs_pack[(grid,)](x, target, n_rows, n_cols, x.stride(0) // 2, n_strips, n_segs, split, per, n_row_tiles,
                         BLOCK_M=bm, BLOCK_W=bn // 2, STAGES=st, INTERLEAVE=il, EVICT=ev, num_warps=w)
    else:
        box_m = min(bm, 256)
        desc = TensorDescriptor(x, list(x.shape), list(x.stride()), [box_m, bn])
        cs_tma[(grid,)](desc, target, n_cols, n_strips, n_segs, split, per, n_row_tiles,
                        BLOCK_M=bm, BOX_M=box_m, BLOCK_N=bn, STAGES=st, INTERLEAVE=il, num_warps=w)
    if split > 1:  # second pass: a plain one-tile-per-step sum of the (split, n_cols) fp32 partials
        bn2 = min(triton.next_power_of_2(n_cols), 128)
        n2 = triton.cdiv(n_cols, bn2)
        cs_ptr[(n2,)](target, out, split, n_cols, n_cols, 1, n2, n2, 1, 1 << 30, triton.cdiv(split, 32),
                      BLOCK_M=32, BLOCK_N=bn2, STAGES=0, INTERLEAVE=0, EVICT=False, num_warps=4)
    return split


def _warm(tasks):
    """Compile a list of (dtype, N, rule) in a worker: run each once on a real-size (uninitialised) matrix."""
    errs = []
    sms = num_sms()
    for dtype, n, r in tasks:
        try:
            x = torch.empty((ELEMENTS // n, n), device="cuda", dtype=getattr(torch, dtype))
            out = torch.empty(n, device="cuda", dtype=torch.float32)
            launch(x, out, r, sms)
            torch.cuda.synchronize()
            del x
        except Exception as e:  # noqa: BLE001
            errs.append(f"{dtype} {n} {name(r)}: {type(e).__name__}: {str(e)[:300]}")
    return errs


def main():
    import pandas as pd

    from gpu_common import load

    T0 = time.time()
    BUDGET = float(os.environ.get("BUDGET", "200"))  # after compiling
    OUT = os.environ.get("OUT", "/tmp")
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 40)
    pd.set_option("display.max_rows", 500)
    sms = num_sms()
    print(torch.cuda.get_device_name(0), torch.__version__, triton.__version__, "SMs", sms, flush=True)

    # one chunk per (dtype, rule): a worker compiles the five N of a rule one after another (shared cache entries)
    chunks = [[(d, n, r) for n in NS] for d in ("bfloat16", "float32") for r in rules_for(getattr(torch, d))]
    tasks = [t for c in chunks for t in c]
    workers = min(16, os.cpu_count() or 4)
    t = time.time()
    with mp.get_context("spawn").Pool(workers) as pool:
        errs = [e for lst in pool.map(_warm, chunks, chunksize=1) for e in lst]
    print(f"compiled {len(tasks)} (dtype, N, rule) in {time.time() - t:.0f}s, {len(errs)} errors", flush=True)
    bad = set()
    for e in errs:
        print("  ", e, flush=True)

    T1 = time.time()
    BUDGET = min(BUDGET, 270 - (T1 - T0))  # the call's limit is 300 s
    print(f"timing budget {BUDGET:.0f}s", flush=True)
    tut = load("tutorials/03_parallel_reduction.py")
    torch.cuda.set_stream(torch.cuda.Stream())
    recs = []

    def measure(dtype, n, rules, rep, check=True):
        tdtype = getattr(torch, dtype)
        x = torch.randn((ELEMENTS // n, n), device="cuda", dtype=tdtype)
        nb = x.numel() * x.element_size()
        ref = x.double().sum(0) if check else None
        cp = torch.empty_like(x)
        light = 2 * nb / bench(lambda: cp.copy_(x), graph=False) * 1e-6
        del cp
        page_out = torch.empty(n, device="cuda", dtype=tdtype)
        cfg = tut["sum_cols"](x, page_out)
        err = rel(page_out, ref) if check else float("nan")
        gbps = nb / bench(lambda: tut["sum_cols"](x, page_out)) * 1e-6
        base = {"dtype": dtype, "N": n, "rep": rep, "light": light}
        recs.append({**base, "rule": "PAGE (tutorial's sum_cols)", "err": err, "split": cfg["SPLIT"], "GB/s": gbps,
                     "%": 100 * gbps / light})
        out = torch.empty(n, device="cuda", dtype=torch.float32)
        for r in rules:
            if (dtype, n, r) in bad:
                continue
            try:
                out.fill_(float("nan"))
                split = launch(x, out, r, sms)
                err = rel(out, ref) if check else float("nan")
                gbps = nb / bench(lambda: launch(x, out, r, sms)) * 1e-6
            except Exception as e:  # noqa: BLE001
                print("  skip", dtype, n, name(r), type(e).__name__, str(e)[:150], flush=True)
                bad.add((dtype, n, r))
                continue
            recs.append({**base, "rule": name(r), "err": err, "split": split, "GB/s": gbps, "%": 100 * gbps / light})
        del x, ref
        torch.cuda.empty_cache()

    def table(df, dtype, title):
        d = df[df.dtype == dtype]
        p = d.pivot_table(index="rule", columns="N", values="%", aggfunc="median")
        p["worst"] = p.min(axis=1)
        p = p.sort_values("worst", ascending=False)
        print(f"\n== {title} {dtype}: % of the copy (median over reps)\n" + p.round(1).to_string(), flush=True)
        errs = d.groupby("rule")["err"].max()
        tol = 1e-5
        wrong = errs[~(errs <= tol)]
        if len(wrong):
            print("WRONG (rel err > 1e-5 or unwritten):", wrong.to_dict(), flush=True)
        return p

    # phase 1: every rule once
    for dtype in ("bfloat16", "float32"):
        for n in NS:
            if time.time() - T1 > BUDGET * 0.55:
                print("phase 1 budget reached", flush=True)
                break
            measure(dtype, n, rules_for(getattr(torch, dtype)), 0)
        print(f"phase 1 {dtype} done at {time.time() - T0:.0f}s", flush=True)
    df = pd.DataFrame(recs)
    df.to_csv(os.path.join(OUT, "colsum_sweep2_p1.csv"), index=False)
    tops = {}
    for dtype in ("bfloat16", "float32"):
        p = table(df, dtype, "phase 1")
        lut = {name(r): r for r in rules_for(getattr(torch, dtype))}
        tops[dtype] = [lut[k] for k in p.index if k in lut][:7]
    # phase 2: the 7 best rules by worst N, and the page, twice more, interleaved with fresh copies
    for rep in (1, 2):
        for dtype in ("bfloat16", "float32"):
            for n in NS:
                if time.time() - T1 > BUDGET * 0.8:
                    break
                measure(dtype, n, tops[dtype], rep, check=False)
    df = pd.DataFrame(recs)
    df.to_csv(os.path.join(OUT, "colsum_sweep2.csv"), index=False)
    for dtype in ("bfloat16", "float32"):
        keep = {name(r) for r in tops[dtype]} | {"PAGE (tutorial's sum_cols)"}
        d = df[df.rule.isin(keep)]
        table(d, dtype, "phase 1+2, 3 reps")
        sp = d[d.dtype == dtype].pivot_table(index="rule", columns="N", values="%",
                                             aggfunc=lambda s: s.max() - s.min())
        print("spread max-min:\n" + sp.round(1).to_string(), flush=True)
        g = d[d.dtype == dtype].pivot_table(index="rule", columns="N", values="GB/s", aggfunc="median")
        g.loc["light (copy)"] = d[d.dtype == dtype].groupby("N")["light"].median()
        print("GB/s:\n" + g.round(0).to_string(), flush=True)
    print(f"total {time.time() - T0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
