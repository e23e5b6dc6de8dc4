"""Scratch: the Pallas kernel's own TTIR compiled by pip Triton and launched from torch, vs Pallas (XLA) and Triton 04."""
import os, sys, functools, statistics, timeit
sys.argv = ["x"]
src = open("dev/probe05/fwd_whole_gpu.py").read()
exec(compile(src[:src.index("TOTAL = 2**26")], "fwd3", "exec"), globals())
from triton.backends.compiler import GPUTarget
sync = lambda _: torch.cuda.synchronize()
copy = jax.jit(jnp.copy)
for n, dtype, warps in [(16384, "float32", 32), (16384, "float32", 16), (32768, "bfloat16", 32)]:
    c = triton.compile(f"dev/probe05/ttir/fwd_{n}_{dtype}_{warps}.ttir", target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=warps, num_stages=1))
    x = jax.random.normal(jax.random.key(0), (2**26 // n, n), dtype)
    w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (n,))).astype(dtype)
    xt, wt = torch.from_dlpack(x).clone(), torch.from_dlpack(w).clone()
    yt, rstd, yt2 = torch.empty_like(xt), torch.empty(xt.shape[0], device=xt.device), torch.empty_like(xt)
    grid = (xt.shape[0], 1, 1)
    launch = lambda: c[grid](xt, wt, yt, rstd)
    launch(); torch.cuda.synchronize()
    k04 = functools.partial(g["rms_norm_fwd_kernel"][(xt.shape[0],)], xt, wt, yt2, rstd, xt.shape[0], n, n, n, 1e-6,
                            HAS_WEIGHT=True, BLOCK_M=1, BLOCK_N=n, num_warps=warps)
    k04(); torch.cuda.synchronize()
    print(n, dtype, warps, "max |ttir - 04|", float((yt.float() - yt2.float()).abs().max()), "n_regs", c.n_regs, flush=True)
    pallas = jax.jit(functools.partial(fwd, MODE="col", warps=warps))
    runs = {"jax copy": (copy, (x,), {}), "pallas (XLA)": (pallas, (x, w), {}), "torch copy": (lambda: yt2.copy_(xt), (), dict(wait=sync)),
            "pallas TTIR (pip triton)": (launch, (), dict(wait=sync)), "triton 04": (k04, (), dict(wait=sync))}
    rounds = [{k: bench(fn, *a, **kw) for k, (fn, a, kw) in runs.items()} for _ in range(3)]
    best = {k: min(r[k] for r in rounds) for k in runs}
    print(n, dtype, warps, "  ".join(f"{k} {100 * best['jax copy'] / v:.1f}" for k, v in best.items()), flush=True)
    del x, w, xt, wt, yt, yt2, rstd
