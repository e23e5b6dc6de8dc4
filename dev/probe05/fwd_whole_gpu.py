"""Scratch (issue 19, session 20): why does tutorial 04's whole-row Triton forward (launched from torch) beat
the same design written in Pallas? Pallas variants vs the Triton kernel vs the copy, in turns; PTX dumped."""
import os, sys, functools, statistics, timeit
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
text = open("tutorials/05_jax_rms_norm.py").read()
src = text[:text.index("\n# Correctness")] + "\n" + text[text.index("\nif TORCH_PEER := "):text.index("\nEPS, TOTAL_ELEMENTS")]
open("/tmp/page05_cut.py", "w").write(src)  # Triton reads its kernels' source from a file
g = {"__name__": "probe"}; exec(compile(src, "/tmp/page05_cut.py", "exec"), g)
jax, jnp, pl, plgpu, torch, triton = g["jax"], g["jnp"], g["pl"], g["plgpu"], g.get("torch"), g.get("triton")
f32 = jnp.float32

def fwd_v(x_ref, w_ref, y_ref, rstd_ref, *, BLOCK_N, MODE, eps=1e-6):
    n_rows, n_cols = x_ref.shape
    row, cols = pl.program_id(0), jnp.arange(BLOCK_N)
    if MODE == "none":
        x = x_ref[row, :].astype(f32)
        w = w_ref[:].astype(f32)
    else:
        ok = cols < n_cols if MODE == "col" else (row < n_rows) & (cols < n_cols)
        x = plgpu.load(x_ref.at[row, cols], mask=ok, other=0).astype(f32)
        w = None
    rstd = jax.lax.rsqrt(jnp.sum(x * x) / n_cols + eps)
    if MODE == "none":
        y_ref[row, :] = (x * rstd * w).astype(y_ref.dtype)
    else:
        w = plgpu.load(w_ref.at[cols], mask=cols < n_cols, other=0).astype(f32)
        plgpu.store(y_ref.at[row, cols], (x * rstd * w).astype(y_ref.dtype), mask=ok)
    plgpu.store(rstd_ref.at[pl.ds(row, 1)], jnp.full((1,), rstd))

def fwd(x, w, *, MODE, warps, stages=1):
    n_rows, n_cols = x.shape
    return pl.pallas_call(functools.partial(fwd_v, BLOCK_N=pl.next_power_of_2(n_cols), MODE=MODE),
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((n_rows,), f32)), grid=(n_rows,),
        compiler_params=g["_params"](warps, stages))(x, w)

def bench(fn, *args, wait=jax.block_until_ready, CALLS=20, REPEATS=10):
    def run():
        for _ in range(CALLS):
            out = fn(*args)
        wait(out)
    run()
    return 1e3 * statistics.median(timeit.repeat(run, number=1, repeat=REPEATS)) / CALLS

TOTAL = 2**26
copy = jax.jit(jnp.copy)
page = jax.jit(lambda x, w: g["_forward"](x, w, 1e-6))
sync = lambda _: torch.cuda.synchronize()
for dtype, n in [("bfloat16", 32768), ("bfloat16", 16384), ("float32", 16384), ("float32", 8192)]:
    x = jax.random.normal(jax.random.key(0), (TOTAL // n, n), dtype)
    w = (1 + 0.1 * jax.random.normal(jax.random.key(2), (n,))).astype(dtype)
    ref = page(x, w)[0]
    runs = {"jax copy": (copy, (x,), {}), "page": (page, (x, w), {})}
    for mode in ("page", "col", "none"):
        for warps in (16, 32):
            fn = jax.jit(functools.partial(fwd, MODE=mode, warps=warps))
            err = float(jnp.max(jnp.abs(fn(x, w)[0].astype(f32) - ref.astype(f32))))
            assert err < 0.05, (mode, warps, err)
            runs[f"pallas {mode} w{warps}"] = (fn, (x, w), {})
    xt, wt = torch.from_dlpack(x).clone(), torch.from_dlpack(w).clone()
    yt, rstd = torch.empty_like(xt), torch.empty(xt.shape[0], device=xt.device)
    runs["torch copy"] = (lambda: yt.copy_(xt), (), dict(wait=sync))
    for warps in (16, 32):
        k = functools.partial(g["rms_norm_fwd_kernel"][(xt.shape[0],)], xt, wt, yt, rstd, xt.shape[0], n, n, n, 1e-6,
                              HAS_WEIGHT=True, BLOCK_M=1, BLOCK_N=triton.next_power_of_2(n), num_warps=warps)
        k()
        runs[f"triton 04 w{warps}"] = (k, (), dict(wait=sync))
    rounds = [{k: bench(fn, *a, **kw) for k, (fn, a, kw) in runs.items()} for _ in range(3)]
    best = {k: min(r[k] for r in rounds) for k in runs}
    light = best["jax copy"]
    print(dtype, n, "  ".join(f"{k} {100 * light / v:.1f}" for k, v in best.items()), flush=True)
    if n == 32768:
        c = g["rms_norm_fwd_kernel"].warmup(xt, wt, yt, rstd, xt.shape[0], n, n, n, 1e-6, HAS_WEIGHT=True, BLOCK_M=1,
                                            BLOCK_N=n, num_warps=32, grid=(1,))
        open(os.path.join(os.environ.get("OUT", "/tmp"), "triton04_bf16_32k_w32.ptx"), "w").write(c.asm["ptx"])
    del x, w, xt, wt, yt, rstd, runs
