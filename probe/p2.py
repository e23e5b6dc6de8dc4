# GPU probe: does a driver-level cuCtxSynchronize on the primary context wait for JAX's queued work (torch untouched)?
import importlib.util, sys, time
import types
src = open("docs/_ext/sol_build.py").read()
src = src[src.index("def _primary_contexts_idle"):src.index("def _settle")]
sb = types.SimpleNamespace(); ns = {}; exec(src, ns); sb._primary_contexts_idle = ns["_primary_contexts_idle"]
import jax, jax.numpy as jnp
print(jax.__version__, jax.devices(), flush=True)
@jax.jit
def chain(x):
    for _ in range(64):
        x = jnp.tanh(x @ x) * 0.5
    return x
x = jnp.ones((8192, 8192), jnp.float32) * 0.001
chain(x).block_until_ready()  # compile
for trial in range(3):
    start = time.perf_counter()
    y = chain(x)
    queued = time.perf_counter() - start
    ready_before = y.is_ready()
    start = time.perf_counter()
    n = sb._primary_contexts_idle()
    waited = time.perf_counter() - start
    ready_after = y.is_ready()
    start = time.perf_counter(); y.block_until_ready(); rest = time.perf_counter() - start
    print(f"trial {trial}: queued in {queued*1e3:.1f} ms, ready before {ready_before}; contexts synced {n}, waited "
          f"{waited*1e3:.1f} ms, ready after {ready_after}, block_until_ready after {rest*1e3:.2f} ms", flush=True)
start = time.perf_counter(); y = chain(x); del y
n = sb._primary_contexts_idle(); print(f"a dropped result: waited {(time.perf_counter()-start)*1e3:.1f} ms, {n}")
