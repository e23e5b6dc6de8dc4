"""Page 01's forward kernel at short rows: every (BLOCK_M, num_warps) against the page's model pick, Helion at its
stored config and a copy, in one run (do_bench median over CUDA-graph replays, L2 flushed; 2^26 elements a point).
Usage (GPU): python3 probe/small_n.py"""
import json, os, pathlib, sys

import torch, triton, triton.language as tl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "dev"))
import helion_tune  # noqa: E402

torch.cuda.set_stream(torch.cuda.Stream())
scope = {"torch": torch, "triton": triton, "tl": tl}
kernel = helion_tune.page_definition("tutorials/01_fused_softmax.py", "softmax_fwd_kernel", scope)
helion = helion_tune.load_kernel("softmax forward")
import helion as hel  # noqa: E402
stored = json.loads(pathlib.Path("docs/helion_configs.json").read_text())[torch.cuda.get_device_name()]["configs"]


def bench(fn):
    fn()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
        fn()
    return triton.testing.do_bench(g.replay, warmup=5, rep=15, return_mode="median")


for dtype in (torch.bfloat16, torch.float32):
    for n in (256, 512, 1024, 2048):
        x = torch.randn(2**26 // n, n, device="cuda", dtype=dtype)
        y, nbytes = torch.empty_like(x), 2 * x.nbytes
        copy = nbytes / triton.testing.do_bench(lambda: y.copy_(x), warmup=5, rep=15, return_mode="median") * 1e-6
        bound = helion.bind((x,))
        bound.set_config(hel.Config(**stored["softmax forward"][str(dtype)[6:]][str(n)]["config"]))
        h = nbytes / bench(lambda: bound(x)) * 1e-6
        got = {}
        for bm in (1, 2, 4, 8, 16):
            for w in (1, 2, 4, 8):
                if bm * n * x.element_size() // (32 * w) > 256:  # over 256 B a thread: spills
                    continue
                launch = lambda: kernel[(triton.cdiv(x.shape[0], bm),)](x, y, *x.shape, x.stride(0), y.stride(0),
                                                                       BLOCK_M=bm, BLOCK_N=n, num_warps=w)
                got[bm, w] = nbytes / bench(launch) * 1e-6
        best = max(got, key=got.get)
        print(f"{str(dtype)[6:]} N={n}: copy {copy:.0f} Helion {h:.0f} ({h / copy:.1%}); best {best} {got[best]:.0f} "
              f"({got[best] / copy:.1%}); all: " + " ".join(f"{k[0]}x{k[1]}w:{v / copy:.3f}" for k, v in got.items()),
              flush=True)
