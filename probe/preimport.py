"""Helion pre-imported before the pages fork: what a page's child then saves, and that CUDA still starts there."""
import sys
import time

sys.path.insert(0, "docs/_ext")
import sol_build  # noqa: E402


def timed_import(name):
    import importlib

    t = time.perf_counter()
    importlib.import_module(name)
    return round(time.perf_counter() - t, 2), "sklearn" in sys.modules


t = time.perf_counter()
done = sol_build.preimport(gpu=True, checked=())
print("PREIMPORT", round(time.perf_counter() - t, 1), "s:", done)
for i in range(2):
    print("a page's child imports helion:", sol_build.run_in_child(timed_import, "helion"), "s, sklearn with it")
t = time.perf_counter()
done = sol_build.preimport(modules=(), gpu=True)
print("checked pre-import", round(time.perf_counter() - t, 1), "s:", done)
print("a page's child imports helion now:", sol_build.run_in_child(timed_import, "helion"))
print("CUDA in a page's child:", sol_build.run_in_child(sol_build._cuda_works))
