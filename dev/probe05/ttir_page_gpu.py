"""Scratch (issue 19, session 20): the page's own kernels at 16 K-32 K, their TTIR compiled by pip Triton and
launched from torch, against the same kernels through JAX/XLA (Pallas' Triton backend), in turns."""
import os, sys, functools
sys.argv = ["x"]
src = open("dev/probe05/fwd_whole_gpu.py").read()
exec(compile(src[:src.index("TOTAL = 2**26")], "fwd3", "exec"), globals())
from triton.backends.compiler import GPUTarget
sync = dict(wait=lambda _: torch.cuda.synchronize())
copy = jax.jit(jnp.copy)
for which in ("fwd", "bwd"):
    for dtype in ("float32", "bfloat16"):
        for n in (16384, 32768):
            size = jnp.dtype(dtype).itemsize
            x = jax.random.normal(jax.random.key(0), (2**26 // n, n), dtype)
            dy = jax.random.normal(jax.random.key(1), x.shape, dtype)
            w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (n,))).astype(dtype)
            rows = x.shape[0]
            y, rstd = g["_forward"](x, w, 1e-6)
            xt, wt, dyt, rt = (torch.from_dlpack(a).clone() for a in (x, w, dy, rstd))
            if which == "fwd":
                kernel, meta, grid, params = g["_fwd_config"](rows, n, size)
                call = pl.pallas_call(functools.partial(kernel, eps=1e-6, **meta), grid=(grid,), compiler_params=params,
                    out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((rows,), f32)))
                jfn, jargs, nbytes = jax.jit(call), (x, w), 2 * x.nbytes
                outs = (torch.empty_like(xt), torch.empty_like(rt))
                targs, ref = (xt, wt) + outs, y
            else:
                meta, grid, params = g["_bwd_config"](rows, n, size)
                call = pl.pallas_call(functools.partial(g["bwd_kernel"], **meta), grid=(grid,), compiler_params=params,
                    out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((grid, n), f32)))
                jfn, jargs, nbytes = jax.jit(call), (x, w, rstd, dy), 3 * x.nbytes
                outs = (torch.empty_like(xt), torch.empty((grid, n), device=xt.device))
                targs, ref = (xt, wt, rt, dyt) + outs, jfn(*jargs)[0]
            c = triton.compile(f"dev/probe05/ttir/page_{which}_{dtype}_{n}.ttir", target=GPUTarget("cuda", 90, 32),
                               options=dict(num_warps=params.num_warps, num_stages=1))
            launch = lambda: c[(grid, 1, 1)](*targs)
            launch(); torch.cuda.synchronize()
            err = float((outs[0].float() - torch.from_dlpack(ref).float()).abs().max())
            tcopy = torch.empty_like(xt)
            runs = {"jax copy": (copy, (x,), {}), "page kernel (XLA)": (jfn, jargs, {}),
                    "torch copy": (lambda: tcopy.copy_(xt), (), sync), "page TTIR (pip Triton)": (launch, (), sync)}
            rounds = [{k: bench(fn, *a, **kw) for k, (fn, a, kw) in runs.items()} for _ in range(3)]
            best = {k: min(r[k] for r in rounds) for k in runs}
            light = 2 * x.nbytes / best["jax copy"]
            print(which, dtype, n, f"regs {c.n_regs} spills {c.n_spills} err {err:.2g} |",
                  "  ".join(f"{k} {100 * (2 * x.nbytes if 'copy' in k else nbytes) / v / light:.1f}" for k, v in best.items()), flush=True)
            del x, dy, w, y, rstd, xt, wt, dyt, rt, outs, targs, ref, runs, tcopy
