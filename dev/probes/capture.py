"""Does a JAX runtime alive (idle, or busy in another thread) invalidate torch's CUDA-graph captures? And a
Triton kernel launched for the first time inside a capture? Each case in its own process."""
import os, subprocess, sys
CASE = r'''
import os, sys, threading, time
os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
case, mode = sys.argv[1], sys.argv[2]
import torch, triton, triton.language as tl
stop = False
if case in ("jax-idle", "jax-busy", "jax-freed"):
    import jax, jax.numpy as jnp
    keep = [jnp.ones((1 << 22,)) * i for i in range(8)]
    [k.block_until_ready() for k in keep]
    if case == "jax-freed":
        del keep  # buffers freed while torch captures
    if case == "jax-busy":
        def loop():
            while not stop:
                a = jnp.ones((1 << 20,)) * 2
                a.block_until_ready()
                del a
        threading.Thread(target=loop, daemon=True).start()
@triton.jit
def twice(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
x = torch.randn(1 << 24, device="cuda"); y = torch.empty_like(x)
torch.cuda.set_stream(s := torch.cuda.Stream())
f = lambda: twice[(x.numel() // 1024,)](x, y, x.numel(), BLOCK=1024)
if case != "first-launch-in-capture":
    f(); torch.cuda.synchronize()
fails, first = 0, None
for i in range(300 if case != "first-launch-in-capture" else 1):
    try:
        with torch.cuda.graph(g := torch.cuda.CUDAGraph(), stream=s, capture_error_mode=mode):
            f()
        g.replay()
    except Exception as err:
        fails += 1; first = first or f"iteration {i}: {type(err).__name__}: {' '.join(str(err).split())[:160]}"
        break
    if case == "jax-freed" and i == 0:
        import gc; gc.collect()
torch.cuda.synchronize()
ok = torch.equal(y, 2 * x)
stop = True
print(f"{case:26s} {mode:13s} captures failed: {fails}  {first or ''}  result ok: {ok}")
'''
for case in ("none", "jax-idle", "jax-freed", "jax-busy", "first-launch-in-capture"):
    for mode in ("global", "thread_local"):
        path = "/tmp/capture_case.py"
        open(path, "w").write(CASE)
        r = subprocess.run([sys.executable, path, case, mode], capture_output=True, text=True, timeout=240)
        print(r.stdout.strip() or f"{case} {mode}: exit {r.returncode} {r.stderr.strip()[-300:]}", flush=True)
