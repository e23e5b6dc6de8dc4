"""Tune the pages' Helion kernels on this GPU and store their configs, for the pages to run without autotuning.

A page that measures Helion (01 and 01_softmax_backward, 02 and 02_layer_norm_backward, 04 and 04_rms_norm_backward,
06_cross_entropy) defines its kernel in its appendix (``@helion.kernel``) and runs each point of its sweep at the config
stored for this GPU and point in the JSON file that the build names in ``SOL_HELION_CONFIGS``
(``docs/helion_configs.json``, where it exists); a point with none stored autotunes there with effort "quick". This tool
tunes exactly the kernel the page defines: it reads the page's source, runs the kernel's definition (its lines, at their
line numbers in the page, so that Helion reads back the page's own text), and each point is the page's own (its
``SWEEP_DTYPES``, its row lengths and its elements a point, ``SWEEP_N`` and ``TOTAL_ELEMENTS`` or as the op names them,
as the page sets them on a GPU).

    python3 dev/helion_tune.py                         # every op, every point not yet stored for this GPU
    python3 dev/helion_tune.py softmax --effort quick  # ops whose name contains "softmax"
    python3 dev/helion_tune.py --list                  # the ops and their points; tunes nothing
    python3 dev/helion_tune.py --budget 500 --force    # retune stored points; start none after 500 s
    python3 dev/helion_tune.py backward --n 4096 8192  # only these N of the ops whose name holds "backward"

The file: {GPU name (torch.cuda.get_device_name): {"helion": version, "torch": ..., "triton": ..., "tuned": date,
"configs": {op: {dtype: {N: {"config": helion.Config's fields, "effort": ..., "seconds": ..., "tested": ...}}}},
"untuned": {op: {dtype: {N: {"why": ..., "effort": ..., "seconds": ...}}}}}}: a point whose search stored no config
says why. It is written after every point, so a run cut short keeps what it tuned, and a later run goes on from there
(a point it left untuned is searched again). A GPU's configs from another Helion version are dropped (a config names
the options of the version that made it). Each tuned config is checked against torch in float64 before it is stored,
with the search's wall time and how many configs it tested (the size of the search, as Helion's metrics count it).
Helion's own autotune cache is neither read nor written (HELION_SKIP_CACHE).
"""

import argparse
import ast
import contextlib
import dataclasses
import datetime
import importlib.metadata
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
STORE = ROOT / "docs" / "helion_configs.json"
DEVICE = "cuda"


def softmax_args(torch, dtype, m, n, page):
    return (torch.randn(m, n, device=DEVICE, dtype=dtype),)


def softmax_reference(torch, args, page):
    return torch.softmax(args[0].double(), dim=-1)


def rms_norm_args(torch, dtype, m, n, page):
    w = torch.rand(n, device=DEVICE, dtype=dtype) + 0.5
    return torch.randn(m, n, device=DEVICE, dtype=dtype), w, page["EPS"]


def rms_norm_reference(torch, args, page):
    x, w, eps = args
    return torch.nn.functional.rms_norm(x.double(), x.shape[-1:], w.double(), eps)


def layer_norm_args(torch, dtype, m, n, page):
    w, b = torch.rand(n, device=DEVICE, dtype=dtype) + 0.5, torch.randn(n, device=DEVICE, dtype=dtype)
    return torch.randn(m, n, device=DEVICE, dtype=dtype), w, b, 1e-5


def layer_norm_reference(torch, args, page):
    x, w, b, eps = args
    return torch.nn.functional.layer_norm(x.double(), x.shape[-1:], w.double(), b.double(), eps)


def softmax_backward_args(torch, dtype, m, n, page):  # y (a softmax's output, as the page saves it) and dy
    x = torch.randn(m, n, device=DEVICE, dtype=dtype)
    return torch.softmax(x, dim=-1), torch.randn_like(x)


def softmax_backward_reference(torch, args, page):  # dx
    y, dy = (t.double() for t in args)
    return y * (dy - (y * dy).sum(1, keepdim=True))


def rms_norm_backward_args(torch, dtype, m, n, page):  # x, w, rstd (fp32, as the forward saves it), dy
    x, w = torch.randn(m, n, device=DEVICE, dtype=dtype), torch.rand(n, device=DEVICE, dtype=dtype) + 0.5
    return x, w, torch.rsqrt(x.float().square().mean(1) + page["EPS"]), torch.randn_like(x)


def rms_norm_backward_reference(torch, args, page):  # dx
    x, w, _, dy = args
    x64 = x.double().requires_grad_()
    y64 = torch.nn.functional.rms_norm(x64, x.shape[-1:], w.double(), page["EPS"])
    return torch.autograd.grad(y64, x64, dy.double())[0]


def layer_norm_backward_args(torch, dtype, m, n, page):  # x, w, mean, rstd (fp32, as the forward saves them), dy
    x, w = torch.randn(m, n, device=DEVICE, dtype=dtype), torch.rand(n, device=DEVICE, dtype=dtype) + 0.5
    var, mean = torch.var_mean(x.float(), dim=1, correction=0)
    return x, w, mean, torch.rsqrt(var + 1e-5), torch.randn_like(x)


def layer_norm_backward_reference(torch, args, page):  # dx
    x, w, _, _, dy = args
    x64 = x.double().requires_grad_()
    y64 = torch.nn.functional.layer_norm(x64, x.shape[-1:], w.double(), None, 1e-5)
    return torch.autograd.grad(y64, x64, dy.double())[0]


def cross_entropy_args(torch, dtype, m, n, page):  # logits and each row's target class
    return torch.randn(m, n, device=DEVICE, dtype=dtype), torch.randint(0, n, (m,), device=DEVICE)


def cross_entropy_reference(torch, args, page):  # each row's loss
    return torch.nn.functional.cross_entropy(args[0].double(), args[1], reduction="none")


def cross_entropy_grad_args(torch, dtype, m, n, page):  # logits, each row's target class, the mean's 1 / M
    return torch.randn(m, n, device=DEVICE, dtype=dtype), torch.randint(0, n, (m,), device=DEVICE), 1.0 / m


def cross_entropy_grad_reference(torch, args, page):  # the gradient of the mean loss
    x64 = args[0].double().requires_grad_()
    return torch.autograd.grad(torch.nn.functional.cross_entropy(x64, args[1]), x64)[0]


@dataclasses.dataclass(frozen=True)
class Op:
    page: str  # the page that defines and measures the kernel
    kernel: str  # the name of its @helion.kernel function
    args: object  # (torch, dtype, M, N, the page's constants) -> the kernel's arguments, as the page passes them
    reference: object  # (torch, args, constants) -> the float64 result the kernel's (first) output is checked against
    constants: tuple = ()  # more of the page's constants that args needs
    sweep: tuple = ("SWEEP_N", "TOTAL_ELEMENTS")  # the page's row lengths and its elements a point (or {dtype: them})


# op (as the page names it in its helion_tuned call) -> where its kernel is and how to call it
OPS = {
    "softmax forward": Op("tutorials/01_fused_softmax.py", "helion_softmax", softmax_args, softmax_reference),
    "softmax backward": Op(
        "tutorials/01_softmax_backward.py", "helion_softmax_backward", softmax_backward_args, softmax_backward_reference
    ),
    "layer_norm forward": Op("tutorials/02_layer_norm.py", "helion_layer_norm", layer_norm_args, layer_norm_reference),
    "layer_norm backward": Op(
        "tutorials/02_layer_norm_backward.py",
        "helion_layer_norm_backward",
        layer_norm_backward_args,
        layer_norm_backward_reference,
    ),
    "rms_norm forward": Op("tutorials/04_rms_norm.py", "helion_rms_norm", rms_norm_args, rms_norm_reference, ("EPS",)),
    "rms_norm backward": Op(
        "tutorials/04_rms_norm_backward.py",
        "helion_rms_norm_backward",
        rms_norm_backward_args,
        rms_norm_backward_reference,
        ("EPS",),
    ),
    "cross_entropy forward": Op(
        "tutorials/06_cross_entropy.py",
        "helion_cross_entropy",
        cross_entropy_args,
        cross_entropy_reference,
        sweep=("SWEEP_V", "TOTAL"),
    ),
    "cross_entropy forward+backward": Op(
        "tutorials/06_cross_entropy_backward.py",
        "helion_cross_entropy_grad",
        cross_entropy_grad_args,
        cross_entropy_grad_reference,
        sweep=("SWEEP_V", "TOTAL"),
    ),
}


def page_constants(op, names, on_gpu=True):
    """The page's top-level assignments to names, run as the page runs them (ON_GPU as given): {name: value}."""
    import torch

    path = ROOT / OPS[op].page
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    scope = {"ON_GPU": on_gpu, "torch": torch}
    for node in tree.body:
        targets = [t for n in getattr(node, "targets", []) for t in (n.elts if isinstance(n, ast.Tuple) else [n])]
        if isinstance(node, ast.Assign) and {getattr(t, "id", None) for t in targets} & set(names):
            exec(compile(ast.Module([node], []), str(path), "exec"), scope)
    missing = set(names) - set(scope)
    assert not missing, f"{path.name} assigns no {sorted(missing)} at its top level"
    return {name: scope[name] for name in names}


def points(op, on_gpu=True):
    """[(dtype name, N, M)]: the points the page measures, M x N = its elements a point (TOTAL_ELEMENTS, or the op's
    name for them: one number, or one a dtype)."""
    lengths, elements = OPS[op].sweep
    page = page_constants(op, ("SWEEP_DTYPES", lengths, elements), on_gpu)
    total = {t: page[elements][t] if isinstance(page[elements], dict) else page[elements] for t in page["SWEEP_DTYPES"]}
    return [(str(t)[6:], n, max(1, total[t] // n)) for t in page["SWEEP_DTYPES"] for n in page[lengths]]


def page_definition(page, name, scope):
    """Run the page's definition of name (a function, at any depth of the page: under its ``if helion:``) in scope,
    compiled under the page's file name at the page's line numbers (Helion reads a kernel's source back from its
    file): the page's own lines, not a copy. Returns what it defines."""
    path = ROOT / page
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, f"{path.name} defines {name} {len(found)} times, not once"
    exec(compile(ast.Module(found, []), str(path), "exec"), scope)
    return scope[name]


def load_kernel(op):
    """The page's Helion kernel for op, as the page defines it (its decorator's settings too)."""
    import helion
    import torch

    scope = {"torch": torch, "helion": helion, "hl": helion.language}
    return page_definition(OPS[op].page, OPS[op].kernel, scope)


def read_store(path):
    return json.loads(pathlib.Path(path).read_text(encoding="utf-8")) if pathlib.Path(path).is_file() else {}


def store_config(path, gpu, op, dtype, n, config, effort, versions, seconds, tested=None):
    """Add one point's config to the file at path (written whole, atomically): the writer the pages read. tested: how
    many configs the search tested, where Helion counted them."""
    record = {"config": json.loads(config.to_json()), "effort": effort, "seconds": round(seconds, 1)}
    if tested:
        record["tested"] = tested
    _store_point(path, gpu, op, dtype, n, versions, "configs", record)


def store_untuned(path, gpu, op, dtype, n, why, effort, versions, seconds):
    """Record why a point has no config (its search found none, kept the default, or failed the float64 check), for
    whoever reads the file to say so; a later search that stores a config for the point removes it."""
    record = {"why": why, "effort": effort, "seconds": round(seconds, 1)}
    _store_point(path, gpu, op, dtype, n, versions, "untuned", record)


def _store_point(path, gpu, op, dtype, n, versions, kind, record):
    """Write one point's record (seconds: the search's wall time) under kind ("configs" or "untuned"), removing the
    point from the other kind; the file is written whole, atomically."""
    store = read_store(path)
    entry = store.get(gpu, {})
    if entry.get("helion") != versions["helion"]:
        entry = {}  # another Helion's configs: dropped
    entry.update(versions, tuned=datetime.date.today().isoformat())
    entry.setdefault(kind, {}).setdefault(op, {}).setdefault(dtype, {})[str(n)] = record
    other = "untuned" if kind == "configs" else "configs"
    by_op = entry.get(other, {})
    by_op.get(op, {}).get(dtype, {}).pop(str(n), None)
    if op in by_op and not by_op[op].get(dtype, True):  # no empty levels left behind
        del by_op[op][dtype]
    if op in by_op and not by_op[op]:
        del by_op[op]
    if other in entry and not by_op:
        del entry[other]
    store[gpu] = entry
    tmp = pathlib.Path(f"{path}.tmp")
    tmp.write_text(json.dumps(store, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


def stored_points(path, gpu, op, helion_version):
    entry = read_store(path).get(gpu, {})
    if entry.get("helion") != helion_version:
        return set()
    return {(t, int(n)) for t, by_n in entry.get("configs", {}).get(op, {}).items() for n in by_n}


@contextlib.contextmanager
def counting_searches():
    """Within it, a list that gets how many configs each of Helion's searches tested (its post-autotune hook)."""
    from helion.autotuner import metrics

    tested = []
    hook = lambda done: tested.append(done.num_configs_tested)  # noqa: E731
    metrics.register_post_autotune_hook(hook)
    try:
        yield tested
    finally:
        metrics.remove_post_autotune_hook(hook)


def autotune(kernel, args, effort, seconds=None):
    """Helion's autotuner at effort, on this point's arguments (its search cut at seconds, where given): the best
    config it found."""
    kernel.settings.autotune_effort = effort
    kernel.settings.autotune_budget_seconds = seconds
    return kernel.autotune(args, force=True)


def relative_error(out, reference):
    return ((out.double() - reference).norm() / reference.norm()).item()


def check(op, kernel, args, page, dtype):
    """The kernel at its new config against torch in float64, within the page's TOLERANCE for dtype."""
    import torch

    out = kernel(*args)
    out = out[0] if isinstance(out, tuple) else out
    error, most = relative_error(out, OPS[op].reference(torch, args, page)), page["TOLERANCE"][dtype]
    assert error <= most, f"{op} {dtype}: relative error {error:.2e} over the page's {most:.0e}"
    return error


def versions():
    return {name: importlib.metadata.version(name) for name in ("helion", "torch", "triton")}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ops", nargs="*", help="tune only the ops whose name contains one of these")
    parser.add_argument("--effort", default="full", choices=("quick", "full"), help="Helion's autotune effort")
    parser.add_argument("--store", default=str(STORE), help="the JSON file of configs (read, then written)")
    parser.add_argument("--force", action="store_true", help="retune points already stored for this GPU")
    parser.add_argument("--budget", type=float, default=0, help="start no point after this many seconds (0: none)")
    parser.add_argument(
        "--seconds",
        type=int,
        default=None,
        help="cut each point's search after this many seconds, at its best so far (Helion's "
        "autotune_budget_seconds; default: none)",
    )
    parser.add_argument("--dtypes", nargs="+", default=None, help="tune only the points of these dtypes (float32 ...)")
    parser.add_argument("--n", nargs="+", type=int, default=None, help="tune only the points of these N (4096 ...)")
    parser.add_argument("--list", action="store_true", help="print the ops and their points; tune nothing")
    options = parser.parse_args(argv)
    ops = [op for op in OPS if not options.ops or any(word in op for word in options.ops)]
    if options.list:
        for op in ops:
            print(f"{op}: {OPS[op].page}, {OPS[op].kernel}: " + ", ".join(f"{t} {m}x{n}" for t, n, m in points(op)))
        return 0

    import helion
    import torch

    os.environ["HELION_SKIP_CACHE"] = "1"  # the autotuner's search, not a config an earlier run left on disk
    gpu, found, start = torch.cuda.get_device_name(), versions(), time.monotonic()
    for op in ops:
        kernel, page = load_kernel(op), page_constants(op, OPS[op].constants + ("TOLERANCE",))
        done = set() if options.force else stored_points(options.store, gpu, op, found["helion"])
        for dtype, n, m in points(op):
            if (
                (dtype, n) in done
                or (options.dtypes and dtype not in options.dtypes)
                or (options.n and n not in options.n)
            ):
                continue
            if options.budget and time.monotonic() - start > options.budget:
                print(f"budget spent: {op} {dtype} N = {n} and after not tuned; run again to go on", flush=True)
                return 0
            torch.manual_seed(n)
            args = OPS[op].args(torch, getattr(torch, dtype), m, n, page)
            effort = options.effort + (f", cut at {options.seconds} s" if options.seconds else "")
            began = time.monotonic()

            def untuned(why):
                store_untuned(options.store, gpu, op, dtype, n, why, effort, found, time.monotonic() - began)
                print(f"{op} {dtype} {m}x{n}: {why}; not stored", flush=True)

            try:
                with counting_searches() as tested:
                    config = autotune(kernel, args, options.effort, options.seconds)
            except helion.exc.NoConfigFound:  # every config it tried failed to compile or to run
                untuned("Helion's search found no working config")
                continue
            seconds = time.monotonic() - began
            if options.seconds and dict(config) == dict(kernel.bind(args).config_spec.default_config()):
                # a tuned figure it is not: more --seconds may find one
                untuned(f"the search, cut at {options.seconds} s, kept Helion's default config")
                continue
            try:
                error = check(op, kernel, args, page, dtype)
            except AssertionError as failed:  # the search's pick is wrong by more than the page allows
                untuned(f"its pick failed the float64 check: {failed}")
                continue
            store_config(options.store, gpu, op, dtype, n, config, effort, found, seconds, sum(tested))
            print(
                f"{op} {dtype} {m}x{n}: {config} (error {error:.1e}, {seconds:.0f} s, {sum(tested)} configs tested)",
                flush=True,
            )
    print(f"{options.store}: configs for {gpu}, {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
