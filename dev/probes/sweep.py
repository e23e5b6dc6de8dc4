"""Launch-settings sweep on the lent GPU: each page's launcher with its settings varied, GB/s of the bytes it must
move. Prints CSV lines to stdout and $OUT/sweep.csv. Sections: PROBE_SECTIONS (default all), each under a time cap."""

import json
import os
import pathlib
import sys
import time

import torch
import triton

sys.path.insert(0, "tests")
import conftest  # noqa: E402

OUT = pathlib.Path(os.environ.get("OUT", "/tmp"))
CSV = open(OUT / "sweep.csv", "a")
DEV = torch.device("cuda")
SMS = torch.cuda.get_device_properties(DEV).multi_processor_count
T0 = time.time()


def emit(**row):
    line = json.dumps(row)
    print(line, flush=True)
    CSV.write(line + "\n")
    CSV.flush()


def ms(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")


def page(stem):
    path = next(pathlib.Path("tutorials").rglob(f"{stem}*.py"))
    return conftest.load_page(path)


def props():
    p = triton.runtime.driver.active.utils.get_device_properties(torch.cuda.current_device())
    t = torch.cuda.get_device_properties(DEV)
    extra = {a: getattr(t, a, None) for a in ("memory_clock_rate", "memory_bus_width", "L2_cache_size",
                                              "shared_memory_per_multiprocessor", "regs_per_multiprocessor",
                                              "max_threads_per_multi_processor", "shared_memory_per_block_optin")}
    emit(section="props", name=t.name, triton=p, torch=extra)
    x = torch.empty(2**28, dtype=torch.uint8, device=DEV)
    y = torch.empty_like(x)
    emit(section="copy", gbs=2 * x.numel() / ms(lambda: y.copy_(x)) * 1e-6)


def warps_for(elements, size, bpt):
    return min(32, max(1, elements * size // (32 * bpt)))


def s01(cap):
    P = page("01_fused")
    fwd, bwd = P["softmax_fwd_kernel"], P["softmax_bwd_kernel"]
    start = time.time()
    for direction, kernel, nbytes in (("fwd", fwd, 2), ("bwd", bwd, 3)):
        for dtype, ns in ((torch.bfloat16, [256, 1024, 4096, 16384]), (torch.float32, [512, 4096, 16384, 32768])):
            if direction == "bwd":
                ns = [n for n in ns if n <= 16384]
            for n in ns:
                x = torch.randn(2**27 // n if dtype == torch.bfloat16 else 2**26 // n, n, device=DEV, dtype=dtype)
                y, dy, dx = torch.empty_like(x), torch.randn_like(x), torch.empty_like(x)
                block_n = triton.next_power_of_2(n)
                for tile in (2048, 4096, 8192, 16384):
                    for bpt in (16, 32, 64):
                        block_m = max(1, tile // block_n)
                        w = max(4, warps_for(block_m * block_n, 4 if direction == "bwd" else x.element_size(), bpt))
                        if time.time() - start > cap:
                            return
                        try:
                            if direction == "fwd":
                                f = lambda: fwd[(triton.cdiv(len(x), block_m),)](x, y, *x.shape, x.stride(0), y.stride(0),
                                                                                 BLOCK_M=block_m, BLOCK_N=block_n, num_warps=w)
                            else:
                                f = lambda: bwd[(triton.cdiv(len(x), block_m),)](x, dy, dx, *x.shape, x.stride(0), dy.stride(0),
                                                                                dx.stride(0), BLOCK_M=block_m, BLOCK_N=block_n,
                                                                                num_warps=w)
                            t = ms(f)
                            emit(section="01" + direction, dtype=str(dtype)[6:], N=n, tile=tile, bpt=bpt, BLOCK_M=block_m,
                                 warps=w, gbs=nbytes * x.numel() * x.element_size() / t * 1e-6)
                        except Exception as e:
                            emit(section="01" + direction, dtype=str(dtype)[6:], N=n, tile=tile, bpt=bpt, error=str(e)[:100])


def s02(cap):
    P = page("02_layer_norm")
    k = P["layer_norm_fwd_kernel"]
    start = time.time()
    for dtype, ns in ((torch.bfloat16, [512, 2048, 8192]), (torch.float32, [512, 2048, 8192, 16384])):
        for n in ns:
            x = torch.randn(2**27 // n if dtype == torch.bfloat16 else 2**26 // n, n, device=DEV, dtype=dtype)
            y, w, b = torch.empty_like(x), torch.randn(n, device=DEV, dtype=dtype), torch.randn(n, device=DEV, dtype=dtype)
            mean, rstd = torch.empty(len(x), device=DEV), torch.empty(len(x), device=DEV)
            t = ms(lambda: P["plain_forward"](x, y, w, b))
            emit(section="02fwd", dtype=str(dtype)[6:], N=n, variant="step0", gbs=2 * x.numel() * x.element_size() / t * 1e-6)
            t = ms(lambda: P["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5))
            emit(section="02fwd", dtype=str(dtype)[6:], N=n, variant="config", gbs=2 * x.numel() * x.element_size() / t * 1e-6)
            block_n = triton.next_power_of_2(n)
            for tile in (2048, 4096, 8192, 16384):
                for bpt in (32, 64, 128):
                    block_m = max(1, tile // block_n)
                    nw = max(2, warps_for(block_m * block_n, x.element_size(), bpt))
                    if time.time() - start > cap:
                        return
                    f = lambda: k[(triton.cdiv(len(x), block_m),)](x, y, w, b, mean, rstd, *x.shape, x.stride(0), y.stride(0),
                                                                  1e-5, HAS_W=True, HAS_B=True, BLOCK_M=block_m,
                                                                  BLOCK_N=block_n, num_warps=nw)
                    t = ms(f)
                    emit(section="02fwd", dtype=str(dtype)[6:], N=n, tile=tile, bpt=bpt, BLOCK_M=block_m, warps=nw,
                         gbs=2 * x.numel() * x.element_size() / t * 1e-6)


def s04(cap):
    P = page("04_rms_norm")
    start = time.time()
    fk, bk = P["rms_norm_fwd_kernel"], P["rms_norm_bwd_kernel"]
    for dtype in (torch.bfloat16, torch.float32):
        for n in (512, 1024, 2048, 4096, 8192):
            x = torch.randn(2**27 // n if dtype == torch.bfloat16 else 2**26 // n, n, device=DEV, dtype=dtype)
            w, dy, dx, y = torch.randn(n, device=DEV, dtype=dtype), torch.randn_like(x), torch.empty_like(x), torch.empty_like(x)
            rstd = torch.rand(len(x), device=DEV) + 0.5
            nb = 3 * x.numel() * x.element_size()
            t = ms(lambda: P["rms_norm_rows_backward"](x, w, rstd, dy, dx))
            emit(section="04bwd", dtype=str(dtype)[6:], N=n, variant="config", gbs=nb / t * 1e-6)
            block_n = triton.next_power_of_2(n)
            for tile in (2048, 4096, 8192):
                for bpt in (16, 32, 64):
                    block_m = max(1, tile // block_n)
                    nw = max(4, warps_for(block_m * block_n, x.element_size(), bpt))
                    for per_sm_warps in (16, 32, 64):
                        if time.time() - start > cap:
                            return
                        grid = max(1, min(triton.cdiv(len(x), block_m), max(1, per_sm_warps // nw) * SMS))
                        part = torch.empty((grid, n), device=DEV)
                        f = lambda: (bk[(grid,)](x, w, rstd, dy, dx, part, *x.shape, BLOCK_M=block_m, BLOCK_N=block_n,
                                                 num_warps=nw), part.sum(0))
                        try:
                            t = ms(f)
                        except Exception as e:
                            emit(section="04bwd", N=n, error=str(e)[:100])
                            continue
                        emit(section="04bwd", dtype=str(dtype)[6:], N=n, tile=tile, bpt=bpt, warps=nw, grid=grid,
                             per_sm_warps=per_sm_warps, gbs=nb / t * 1e-6)
        for n in (2048, 8192, 16384):
            x = torch.randn(2**27 // n if dtype == torch.bfloat16 else 2**26 // n, n, device=DEV, dtype=dtype)
            w, y, rstd = torch.randn(n, device=DEV, dtype=dtype), torch.empty_like(x), torch.empty(len(x), device=DEV)
            block_n = triton.next_power_of_2(n)
            for tile in (4096, 8192, 16384):
                for bpt in (32, 64, 128):
                    block_m = max(1, tile // block_n)
                    nw = max(4, warps_for(block_m * block_n, x.element_size(), bpt))
                    if time.time() - start > cap:
                        return
                    f = lambda: fk[(triton.cdiv(len(x), block_m),)](x, w, y, rstd, *x.shape, x.stride(0), y.stride(0), 1e-6,
                                                                   HAS_WEIGHT=True, BLOCK_M=block_m, BLOCK_N=block_n,
                                                                   num_warps=nw)
                    t = ms(f)
                    emit(section="04fwd", dtype=str(dtype)[6:], N=n, tile=tile, bpt=bpt, warps=nw,
                         gbs=2 * x.numel() * x.element_size() / t * 1e-6)


def s06(cap):
    P = page("06_cross_entropy")
    start = time.time()
    config = P["_config"]
    for dtype in (torch.bfloat16, torch.float32):
        for v in (32000, 128256):
            x = torch.randn((2**30 if dtype == torch.bfloat16 else 2**29) // v, v, device=DEV, dtype=dtype)
            target = torch.randint(0, v, (len(x),), device=DEV)
            for chunk in (2048, 4096, 8192):
                for per_sm in (4, 8, 16):
                    for stages in (1, 2, 3):
                        if time.time() - start > cap:
                            P.data["_config"] = config
                            return
                        P.data["FORWARD_CHUNK_N"] = P.data["CHUNK_N"] = chunk
                        P.data["_config"] = lambda *a, per_sm=per_sm, stages=stages, **k: config(*a, **k, per_sm=per_sm,
                                                                                                 stages=stages)
                        try:
                            t = ms(lambda: P["cross_entropy_rows"](x, target, None, -100, True))
                        except Exception as e:
                            emit(section="06fwd", error=str(e)[:100])
                            continue
                        emit(section="06fwd", dtype=str(dtype)[6:], V=v, chunk=chunk, per_sm=per_sm, stages=stages,
                             gbs=x.numel() * x.element_size() / t * 1e-6)
    P.data["_config"] = config


def s03(cap):
    P = page("03_parallel")
    start = time.time()
    k = P["sum_kernel"]
    for dtype in (torch.float32, torch.bfloat16):
        for n in (2**20, 2**24, 2**28):
            x = torch.randn(n, device=DEV, dtype=dtype)
            out = torch.empty(1, device=DEV, dtype=dtype)
            t = ms(lambda: x.sum())
            emit(section="03", dtype=str(dtype)[6:], n=n, variant="torch", gbs=n * x.element_size() / t * 1e-6)
            t = ms(lambda: P["sum_vector"](x, out))
            emit(section="03", dtype=str(dtype)[6:], n=n, variant="config", gbs=n * x.element_size() / t * 1e-6)
            tick = torch.zeros(1, dtype=torch.int32, device=DEV)
            for per_sm in (1, 2, 4, 8):
                for block, nw in ((2048, 8), (4096, 8), (4096, 16), (8192, 16), (8192, 32)):
                    if time.time() - start > cap:
                        return
                    grid = min(triton.cdiv(n, block), per_sm * SMS)
                    part = torch.empty(grid, device=DEV)
                    f = lambda: k[(grid,)](x, part, tick, out, n, BLOCK=block, PARTIALS=triton.next_power_of_2(grid),
                                           num_warps=nw)
                    t = ms(f)
                    emit(section="03", dtype=str(dtype)[6:], n=n, per_sm=per_sm, block=block, warps=nw,
                         gbs=n * x.element_size() / t * 1e-6)


def s61(cap):
    P = page("61_cross")
    from torch.profiler import ProfilerActivity, profile
    for dtype in (torch.bfloat16,):
        v = 128256
        x = torch.randn(2**30 // v, v, device=DEV, dtype=dtype)
        target = torch.randint(0, v, (len(x),), device=DEV)
        dx = torch.empty_like(x)
        xg = x.clone().requires_grad_(True)
        calls = {"split": lambda: P["ce_split_rows"](x, target, None, -100, True, dx),
                 "ours": lambda: torch.autograd.grad(P["cross_entropy"](xg, target), xg)}
        for name, f in calls.items():
            t = ms(f)
            emit(section="61", name=name, gbs=2 * x.numel() * x.element_size() / t * 1e-6)
            with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
                for _ in range(3):
                    f()
                torch.cuda.synchronize()
            emit(section="61prof", name=name, table=prof.key_averages().table(sort_by="cuda_time_total", row_limit=15))


SECTIONS = {"props": lambda cap: props(), "61": s61, "03": s03, "02": s02, "04": s04, "01": s01, "06": s06}
CAPS = {"props": 30, "61": 40, "03": 40, "02": 60, "04": 90, "01": 80, "06": 60}
for name in os.environ.get("PROBE_SECTIONS", ",".join(SECTIONS)).split(","):
    t = time.time()
    try:
        SECTIONS[name](CAPS[name])
    except Exception as e:
        import traceback
        emit(section=name, error=traceback.format_exc()[-800:])
    emit(section=name, seconds=time.time() - t, total=time.time() - T0)
