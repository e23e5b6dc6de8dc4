# probe (session 22): which of quack's imports start CUDA, and what each costs after the build's pre-imports.
# Run on a GPU machine with quack installed, from the repository root: python3 dev/probes/quack_probe.py cutlass cutlass.torch quack.dsl quack
import importlib, os, sys, time
sys.path.insert(0, "docs/_ext")
import sol_build
t = time.time(); sol_build.preimport(gpu=True); print(f"preimport {time.time()-t:.1f}s", flush=True)
def child_ok():
    pid = os.fork()
    if pid == 0:
        try:
            import torch; torch.ones(4, device="cuda").add_(1).sum().item(); os._exit(0)
        except BaseException as e:
            print("child:", repr(e)[:200], flush=True); os._exit(1)
    for _ in range(300):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done: return os.waitstatus_to_exitcode(status) == 0
        time.sleep(0.1)
    os.kill(pid, 9); return "hung"
for name in sys.argv[1:]:
    t = time.time()
    try:
        importlib.import_module(name); msg = "ok"
    except Exception as e:
        msg = repr(e)[:150]
    print(f"{name}: {time.time()-t:.2f}s {msg}; forked child CUDA works: {child_ok()}", flush=True)
