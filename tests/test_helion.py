"""Helion, a peer of the pages that dev/helion_tune.py lists (01 and 01_softmax_backward, 02 and 02_layer_norm_backward,
04 and 04_rms_norm_backward, 06_cross_entropy): their kernels against float64, the store of tuned configs that the
tool writes and the pages read, and that the tool tunes the very kernels the pages define.

Without Helion installed the tests that run it skip and say so; the ones that read the sources run everywhere."""

import ast
import importlib.metadata
import importlib.util
import inspect
import json
import os
import re
import sys

import pytest
import torch

from conftest import ROOT, TUTORIALS

sys.path.insert(0, str(ROOT / "dev"))
import helion_tune  # noqa: E402

HAS_HELION = importlib.util.find_spec("helion") is not None
needs_helion = pytest.mark.skipif(
    not HAS_HELION,
    reason="Helion is not installed (pip install helion==1.2.0): its kernels, the config store and the tool's "
    "kernels are not checked here",
)
OPS = list(helion_tune.OPS)
GPU = "Test GPU"


def helion_kernels():
    """{(page, function name): its source} of every function a page decorates with helion.kernel."""
    found = {}
    for path in TUTORIALS:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            decorators = [ast.unparse(d) for d in getattr(node, "decorator_list", [])]
            if isinstance(node, ast.FunctionDef) and any("helion.kernel" in d for d in decorators):
                found[str(path.relative_to(ROOT)), node.name] = ast.unparse(node)
    return found


def test_the_tool_tunes_every_helion_kernel_of_the_pages():
    """Every @helion.kernel of a page is an op of dev/helion_tune.py, and back; a page that carries another page's
    kernel letter for letter (a deep dive measuring it) reads that op's configs and needs no op of its own."""
    kernels = helion_kernels()
    registered = {(op.page, op.kernel) for op in helion_tune.OPS.values()}
    assert registered <= set(kernels), "an op of dev/helion_tune.py names no @helion.kernel of its page"
    carried = {
        key for key, source in kernels.items() if key not in registered and source in {kernels[op] for op in registered}
    }
    assert set(kernels) - carried == registered, "every @helion.kernel of a page is an op of dev/helion_tune.py"


def test_the_pages_read_the_store_with_one_reader():
    """Each page carries its own helion_tuned (a page stands alone); they are the same lines, so that the tool's store
    means one thing to every page."""
    readers = set()
    for page in sorted({spec.page for spec in helion_tune.OPS.values()}):
        tree = ast.parse((ROOT / page).read_text(encoding="utf-8"))
        found = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "helion_tuned"]
        assert len(found) == 1, f"{page} defines helion_tuned {len(found)} times, not once"
        readers.add(found[0])
    assert len(readers) == 1, "the pages' helion_tuned differ"


@pytest.mark.parametrize("op", OPS)
def test_the_page_runs_its_kernel_under_the_tools_op_at_the_points_it_sweeps(op):
    """The page reads the configs stored under the tool's op name for its kernel, at the points of its own sweep: the
    points the tool tunes (its SWEEP_DTYPES and row lengths, SWEEP_N or the op's name for them, M x N its elements a
    point, TOTAL_ELEMENTS or the op's name for them, one number or one a dtype)."""
    spec = helion_tune.OPS[op]
    lengths, elements = spec.sweep
    source = (ROOT / spec.page).read_text(encoding="utf-8")
    call = f'helion_tuned({spec.kernel}, "{op}",'
    assert call in source, f"{spec.page} does not run {spec.kernel} through helion_tuned(..., {op!r}, ...)"
    points = " ".join(source[source.index(call) :].split("\n", 2)[:2])
    assert f"for t in SWEEP_DTYPES for n in {lengths}]" in points, f"{spec.page}: Helion's points are not its sweep's"
    sweep = rf"for dtype in SWEEP_DTYPES( for n in |:\s+for n_cols in ){lengths}\b"
    assert re.search(sweep, source), f"{spec.page}: its sweep is not its SWEEP_DTYPES and {lengths}"
    for on_gpu in (True, False):
        page = helion_tune.page_constants(op, ("SWEEP_DTYPES", lengths, elements), on_gpu)
        total = lambda t: page[elements][t] if isinstance(page[elements], dict) else page[elements]  # noqa: E731
        assert helion_tune.points(op, on_gpu) == [
            (str(t)[6:], n, max(1, total(t) // n)) for t in page["SWEEP_DTYPES"] for n in page[lengths]
        ]
        assert {str(t)[6:] for t in page["SWEEP_DTYPES"]} == {"float32", "bfloat16"}


@needs_helion
@pytest.mark.parametrize("op", OPS)
def test_the_tool_loads_the_pages_own_lines(op):
    """The kernel the tool tunes is the page's definition, compiled from the page's file at its line numbers (Helion
    reads a kernel's source back from there), with the page's decorator."""
    spec = helion_tune.OPS[op]
    kernel = helion_tune.load_kernel(op)
    path = ROOT / spec.page
    source = path.read_text(encoding="utf-8")
    (node,) = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == spec.kernel]
    assert kernel.fn.__code__.co_filename == str(path)
    lines = source.splitlines(keepends=True)[node.decorator_list[0].lineno - 1 : node.end_lineno]
    assert inspect.getsource(kernel.fn) == "".join(lines), "Helion would read another text than the page's kernel"
    assert kernel.settings.static_shapes and kernel.settings.autotune_effort == "quick"


def arguments(op, dtype, m, n, device):
    """The kernel's arguments as its page passes them, logits and inputs of 4 x N(0, 1)."""
    x = torch.randn(m, n, dtype=dtype, device=device).mul_(4)
    w, dy = torch.rand(n, dtype=dtype, device=device) + 0.5, torch.randn(m, n, dtype=dtype, device=device)
    var, mean = torch.var_mean(x.float(), dim=1, correction=0)  # as layer norm's forward saves them, in fp32
    return {
        "softmax forward": lambda: (x,),
        "softmax backward": lambda: (torch.softmax(x, dim=-1), dy),  # y as the forward saves it
        "layer_norm forward": lambda: (x, w, torch.randn(n, dtype=dtype, device=device), 1e-5),
        "layer_norm backward": lambda: (x, w, mean, torch.rsqrt(var + 1e-5), dy),
        "rms_norm forward": lambda: (x, w, 1e-6),
        "rms_norm backward": lambda: (x, w, torch.rsqrt(x.float().square().mean(1) + 1e-6), dy),
        "cross_entropy forward": lambda: (x, torch.randint(0, n, (m,), device=device)),
        "cross_entropy forward+backward": lambda: (x, torch.randint(0, n, (m,), device=device), 1.0 / m),
    }[op]()


def reference(op, args):
    """[(float64 result, the size its error is relative to)]: softmax's y, its backward's dx; layer norm's y, mean and
    rstd, its backward's dx (against its terms' size, r * dy * w: they cancel at N = 1), dw and db; RMSNorm's y and
    rstd, its backward's dx (as layer norm's) and dw; each row's cross-entropy loss."""
    x = args[0].double()
    if op == "layer_norm forward":
        var, mean = torch.var_mean(x, dim=1, correction=0)
        rstd = torch.rsqrt(var + args[3])
        results = [(x - mean[:, None]) * rstd[:, None] * args[1].double() + args[2].double(), mean, rstd]
    elif op == "layer_norm backward":
        x64, w64, dy = x.requires_grad_(), args[1].double().requires_grad_(), args[4].double()
        b64 = torch.zeros_like(w64, requires_grad=True)
        y64 = torch.nn.functional.layer_norm(x64, x.shape[-1:], w64, b64, 1e-5)
        dx, _, db = torch.autograd.grad(y64, (x64, w64, b64), dy)
        var, mean = torch.var_mean(x.detach(), dim=1, correction=0, keepdim=True)
        rstd = torch.rsqrt(var + 1e-5)
        dw = (dy * (x.detach() - mean) * rstd).sum(0)  # its definition: exactly 0 at N = 1, where autograd's is 1e-14
        return [(dx, (dy * w64.detach() * rstd).norm()), (dw, dw.norm()), (db, db.norm())]
    elif op == "softmax forward":
        results = [torch.softmax(x, dim=-1)]
    elif op == "softmax backward":
        dy = args[1].double()
        results = [x * (dy - (x * dy).sum(1, keepdim=True))]
    elif op == "rms_norm forward":
        rstd = torch.rsqrt(x.square().mean(1) + args[2])
        results = [x * rstd[:, None] * args[1].double(), rstd]
    elif op == "rms_norm backward":
        x64, w64, dy = x.requires_grad_(), args[1].double().requires_grad_(), args[3].double()
        dx, dw = torch.autograd.grad(torch.nn.functional.rms_norm(x64, x.shape[-1:], w64, 1e-6), (x64, w64), dy)
        rstd = torch.rsqrt(x.detach().square().mean(1, keepdim=True) + 1e-6)
        return [(dx, (dy * w64.detach() * rstd).norm()), (dw, dw.norm())]
    elif op == "cross_entropy forward+backward":  # the mean loss's gradient, then each row's loss
        losses = torch.nn.functional.cross_entropy(x.requires_grad_(), args[1], reduction="none")
        results = [torch.autograd.grad(losses.mean(), x)[0], losses.detach()]
    else:
        results = [torch.nn.functional.cross_entropy(x, args[1], reduction="none")]
    return [(want, want.norm()) for want in results]


def outputs(op, out):
    """The kernel's results, as its page uses them: the backwards' dw (and layer norm's db) are their partials' sums."""
    out = out if isinstance(out, tuple) else (out,)
    return (out[0], *(partial.sum(0) for partial in out[1:])) if op.endswith("norm backward") else out


SHAPES = [(7, 1), (33, 257), (5, 1000), (3, 4096)]


@needs_helion
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", OPS)
def test_the_pages_kernel_matches_float64(op, dtype):
    """Each page's Helion kernel (in Helion's reference mode on the CPU, compiled at its default config on a GPU)
    within the page's tolerance of float64, at powers of two and not."""
    import helion

    kernel = helion_tune.load_kernel(op)
    on_gpu = torch.cuda.is_available()
    if not on_gpu:
        kernel.settings.ref_mode = helion.RefMode.EAGER
    tolerance = helion_tune.page_constants(op, ("TOLERANCE",))["TOLERANCE"][str(dtype)[6:]]
    for m, n in SHAPES:
        torch.manual_seed(n)
        args = arguments(op, dtype, m, n, "cuda" if on_gpu else "cpu")
        if on_gpu:
            bound = kernel.bind(args)
            bound.set_config(bound.config_spec.default_config())
        got, expected = outputs(op, kernel(*args)), reference(op, args)
        assert len(got) == len(expected), f"{op}: {len(got)} results, not {len(expected)}"
        for out, (want, size) in zip(got, expected):
            # relative to the result's size; where that is 0 (a softmax's dx, a loss at N = 1), absolute
            error = ((out.double() - want).norm() / (size if size > 0 else 1)).item()
            assert error <= tolerance, f"{op} {str(dtype)[6:]} {m}x{n}: relative error {error:.2e} over {tolerance}"


class Recorder:
    """A kernel's stand-in: one bound kernel per shape, as Helion's; records the configs set on each and the calls."""

    def __init__(self):
        self.set, self.calls, self.bound = {}, [], {}

    def bind(self, args):
        recorder, shape = self, tuple(args[0].shape)

        class Bound:
            def set_config(self, config):
                recorder.set.setdefault(shape, []).append(config)

            def __call__(self, *args):
                recorder.calls.append(shape)

        return self.bound.setdefault(shape, Bound())


def page_reader(op, where):
    """The page's helion_tuned, its own lines, with the page's globals it reads (WHERE: this GPU's name)."""
    import helion

    scope = {"os": os, "json": json, "importlib": importlib, "helion": helion, "WHERE": where}
    return helion_tune.page_definition(helion_tune.OPS[op].page, "helion_tuned", scope)


def meta_args(op, dtype, n, m):
    return helion_tune.OPS[op].args(torch, getattr(torch, dtype), m, n, {"EPS": 1e-6})


@pytest.fixture
def on_meta(monkeypatch):
    """The tool's tensors on the meta device without a GPU: shapes without memory, which Helion compiles for there;
    on a GPU, on the GPU (Helion's lowering for a GPU refuses meta tensors' unknown sizes)."""
    monkeypatch.setattr(helion_tune, "DEVICE", "cuda" if torch.cuda.is_available() else "meta")


@needs_helion
@pytest.mark.parametrize("op", OPS)
def test_configs_go_from_the_tool_to_the_page(op, tmp_path, monkeypatch, capsys, on_meta):
    """The tool stores a config for every point of the page on a GPU; the page, on that GPU, runs each point at its
    config and autotunes none; on a GPU the file has no key for it autotunes every point (the kernel's own effort);
    the stored config is one the page's kernel compiles (to Triton, for meta tensors)."""
    import helion

    store = tmp_path / "helion_configs.json"
    kernel, versions = helion_tune.load_kernel(op), helion_tune.versions()
    points = helion_tune.points(op, on_gpu=False)
    configs = {}
    for dtype, n, m in points:
        bound = kernel.bind(meta_args(op, dtype, n, m))
        configs[dtype, n] = bound.config_spec.default_config()
        helion_tune.store_config(store, GPU, op, dtype, n, configs[dtype, n], "full", versions, 1.0)
    monkeypatch.setenv("SOL_HELION_CONFIGS", str(store))
    monkeypatch.delenv("SOL_HELION_AUTOTUNE", raising=False)  # autotuning allowed, whatever the calling shell says
    capsys.readouterr()

    recorder = Recorder()
    run = page_reader(op, GPU)(recorder, op, [(t, n) for t, n, _ in points])
    assert "none autotuned here" in capsys.readouterr().out
    for dtype, n, m in points:
        args = meta_args(op, dtype, n, m)
        run(*args), run(*args)
        (config,) = recorder.set[m, n]  # set once, before the first call
        assert config == configs[dtype, n]
        assert "def " in kernel.bind(args).to_triton_code(helion.Config(**dict(config))), "no Triton for it"
    assert len(recorder.calls) == 2 * len(points)

    recorder = Recorder()
    run = page_reader(op, "Another GPU")(recorder, op, [(t, n) for t, n, _ in points])
    out = capsys.readouterr().out
    assert "autotuned here (effort quick) at each point" in out and "none tuned on Another GPU" in out, out
    run(*meta_args(op, *points[0]))
    assert recorder.set == {} and len(recorder.calls) == 1, "a point with no stored config is left to autotune"

    monkeypatch.setenv("SOL_HELION_AUTOTUNE", "0")  # a build that autotunes nothing: such a point is not measured
    recorder = Recorder()
    run = page_reader(op, "Another GPU")(recorder, op, [(t, n) for t, n, _ in points])
    assert "not measured here (SOL_HELION_AUTOTUNE=0) at each point" in capsys.readouterr().out
    with pytest.raises(RuntimeError, match="SOL_HELION_AUTOTUNE=0"):
        run(*meta_args(op, *points[0]))
    assert recorder.calls == [], "an untuned point ran"
    run = page_reader(op, GPU)(recorder, op, [(t, n) for t, n, _ in points])
    run(*meta_args(op, *points[0]))
    assert len(recorder.calls) == 1, "a tuned point is measured whatever SOL_HELION_AUTOTUNE says"
    monkeypatch.delenv("SOL_HELION_AUTOTUNE")

    stored = json.loads(store.read_text())
    stored[GPU]["helion"] = "0.0"
    store.write_text(json.dumps(stored))
    page_reader(op, GPU)(Recorder(), op, [(t, n) for t, n, _ in points])
    assert "those stored are Helion 0.0's" in capsys.readouterr().out, "another Helion's configs are not used"

    monkeypatch.delenv("SOL_HELION_CONFIGS")
    page_reader(op, GPU)(Recorder(), op, [(t, n) for t, n, _ in points])
    assert "no file of tuned configs" in capsys.readouterr().out


def not_the_default(kernel, args):
    """A config a search could return: Helion's default for these arguments with other warps."""
    import helion

    default = dict(kernel.bind(args).config_spec.default_config())
    return helion.Config(**{**default, "num_warps": 2 if default["num_warps"] != 2 else 4})


@needs_helion
def test_the_tool_tunes_each_point_once_and_keeps_what_it_tuned(tmp_path, monkeypatch, on_meta):
    """dev/helion_tune.py's run: every op's every point stored under this GPU's name, each at the config its autotuner
    returned and the number of configs its searches tested (as Helion's metrics hook reports them); a second run tunes
    nothing, --force all again; another Helion's configs are replaced."""
    from helion.autotuner import metrics

    store, tuned = tmp_path / "configs.json", []

    def autotune(kernel, args, effort, seconds=None):
        assert seconds in (None, 7)
        tuned.append((str(args[0].dtype)[6:], args[0].shape[1]))
        for count in (args[0].shape[1] // 100, 3):  # two searches, as a search in stages reports them
            metrics._run_post_autotune_hooks(metrics.AutotuneMetrics(num_configs_tested=count))
        return not_the_default(kernel, args)

    monkeypatch.setattr(helion_tune, "autotune", autotune)
    monkeypatch.setattr(helion_tune, "check", lambda *args: 0.0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: GPU)
    monkeypatch.setattr(helion_tune, "points", lambda op, on_gpu=True: [("float32", 257, 3), ("bfloat16", 1000, 2)])
    assert helion_tune.main(["--store", str(store), "--effort", "quick", "--seconds", "7"]) == 0
    entry = json.loads(store.read_text())[GPU]
    assert entry["helion"] == helion_tune.versions()["helion"]
    assert {op: {t: sorted(by_n) for t, by_n in c.items()} for op, c in entry["configs"].items()} == {
        op: {"float32": ["257"], "bfloat16": ["1000"]} for op in OPS
    }
    stored = [p for c in entry["configs"].values() for by_n in c.values() for p in by_n.values()]
    assert all(p["effort"] == "quick, cut at 7 s" and p["seconds"] >= 0 for p in stored)
    assert sorted(p["tested"] for by_n in entry["configs"]["softmax forward"].values() for p in by_n.values()) == [
        5,
        13,
    ]
    assert not metrics._post_autotune_hooks, "the tool left its hook in Helion"
    assert len(tuned) == 2 * len(OPS)
    helion_tune.main(["--store", str(store)])
    assert len(tuned) == 2 * len(OPS), "stored points were tuned again"
    helion_tune.main(["--store", str(store), "--force", "softmax"])
    assert len(tuned) == 2 * len(OPS) + 2 * len([op for op in OPS if "softmax" in op])


@needs_helion
def test_a_point_whose_search_finds_nothing_is_left_untuned_and_the_run_goes_on(tmp_path, monkeypatch, on_meta):
    """Helion's search can end with no working config (every one it tried failed to compile in time): the tool
    stores nothing for that point, says so, and tunes the next."""
    import helion

    store = tmp_path / "configs.json"

    def autotune(kernel, args, effort, seconds=None):
        if args[0].shape[1] == 257:
            raise helion.exc.NoConfigFound()
        return helion.Config(num_warps=4)

    monkeypatch.setattr(helion_tune, "autotune", autotune)
    monkeypatch.setattr(helion_tune, "check", lambda *args: 0.0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: GPU)
    monkeypatch.setattr(helion_tune, "points", lambda op, on_gpu=True: [("float32", 257, 3), ("bfloat16", 1000, 2)])
    assert helion_tune.main(["--store", str(store), "rms_norm backward"]) == 0
    entry = json.loads(store.read_text())[GPU]
    configs = entry["configs"]["rms_norm backward"]
    assert configs.keys() == {"bfloat16"} and list(configs["bfloat16"]) == ["1000"]
    why = entry["untuned"]["rms_norm backward"]["float32"]["257"]
    assert why["why"] == "Helion's search found no working config" and why["seconds"] >= 0


@needs_helion
def test_a_cut_search_that_kept_the_default_config_stores_nothing(tmp_path, monkeypatch, on_meta, capsys):
    """A search cut short (--seconds) that returns Helion's default config found nothing better in its time: the tool
    stores it for no point (a page would show an untuned kernel as Helion's), says so, and tunes the next; a full
    search's default is stored."""
    store = tmp_path / "configs.json"

    def autotune(kernel, args, effort, seconds=None):
        default = kernel.bind(args).config_spec.default_config()
        return default if args[0].shape[1] == 257 else not_the_default(kernel, args)

    monkeypatch.setattr(helion_tune, "autotune", autotune)
    monkeypatch.setattr(helion_tune, "check", lambda *args: 0.0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: GPU)
    monkeypatch.setattr(helion_tune, "points", lambda op, on_gpu=True: [("float32", 257, 3), ("bfloat16", 1000, 2)])
    assert helion_tune.main(["--store", str(store), "--seconds", "5", "rms_norm forward"]) == 0
    assert "kept Helion's default config; not stored" in capsys.readouterr().out
    entry = json.loads(store.read_text())[GPU]
    assert entry["configs"]["rms_norm forward"].keys() == {"bfloat16"}
    untuned = entry["untuned"]["rms_norm forward"]
    assert untuned.keys() == {"float32"} and list(untuned["float32"]) == ["257"]
    record = untuned["float32"]["257"]
    assert record["why"] == "the search, cut at 5 s, kept Helion's default config"
    assert record["effort"] == "full, cut at 5 s" and record["seconds"] >= 0
    assert helion_tune.main(["--store", str(store), "rms_norm forward"]) == 0  # no cut: the default is its pick
    entry = json.loads(store.read_text())[GPU]
    assert set(entry["configs"]["rms_norm forward"]) == {"bfloat16", "float32"}
    assert "untuned" not in entry, "a point tuned since is still said to be untuned"


@needs_helion
def test_a_pick_that_fails_the_float64_check_is_left_untuned_with_its_error(tmp_path, monkeypatch, on_meta):
    """A config whose results are off by more than the page allows is stored for no point; the file says why, and the
    run tunes the next point."""
    store = tmp_path / "configs.json"

    def check(op, kernel, args, page, dtype):
        if args[0].shape[1] == 257:
            raise AssertionError("relative error 3.00e-01 over the page's 1e-02")
        return 0.0

    import helion

    monkeypatch.setattr(helion_tune, "autotune", lambda *args: helion.Config(num_warps=4))
    monkeypatch.setattr(helion_tune, "check", check)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: GPU)
    monkeypatch.setattr(helion_tune, "points", lambda op, on_gpu=True: [("float32", 257, 3), ("bfloat16", 1000, 2)])
    assert helion_tune.main(["--store", str(store), "softmax forward"]) == 0
    entry = json.loads(store.read_text())[GPU]
    assert entry["configs"]["softmax forward"].keys() == {"bfloat16"}
    why = entry["untuned"]["softmax forward"]["float32"]["257"]["why"]
    assert why == "its pick failed the float64 check: relative error 3.00e-01 over the page's 1e-02"


@needs_helion
def test_no_stored_config_of_a_cut_search_is_helions_default_for_its_point(on_meta):
    """A stored config is the pick of a search: one cut short (its effort says "cut at") that equals Helion's default
    for its point found nothing better in its time, and a page would time an untuned kernel as Helion's. A search that
    ran to its end may find the default the fastest: that is a tuned pick."""
    store = json.loads(helion_tune.STORE.read_text(encoding="utf-8")) if helion_tune.STORE.exists() else {}
    defaults = []
    for gpu, entry in store.items():
        for op, by_dtype in entry.get("configs", {}).items():
            kernel, rows = helion_tune.load_kernel(op), {(t, n): m for t, n, m in helion_tune.points(op, on_gpu=True)}
            for dtype, by_n in by_dtype.items():
                for n, stored in ((n, p) for n, p in by_n.items() if "cut at" in p["effort"]):
                    args = meta_args(op, dtype, int(n), rows[dtype, int(n)])
                    if stored["config"] == dict(kernel.bind(args).config_spec.default_config()):
                        defaults.append(f"{gpu}: {op} {dtype} N = {n} ({stored['effort']})")
    assert not defaults, "Helion's default configs stored as tuned:\n" + "\n".join(defaults)


@needs_helion
def test_the_tool_tunes_only_the_n_asked_for(tmp_path, monkeypatch, on_meta):
    """--n keeps a run to those row lengths (the points inside a page's range, say), with --dtypes beside it."""
    import helion

    store, tuned = tmp_path / "configs.json", []

    def autotune(kernel, args, effort, seconds=None):
        tuned.append((str(args[0].dtype)[6:], args[0].shape[1]))
        return helion.Config(num_warps=4)

    monkeypatch.setattr(helion_tune, "autotune", autotune)
    monkeypatch.setattr(helion_tune, "check", lambda *args: 0.0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: GPU)
    sweep = [("float32", 257, 3), ("bfloat16", 257, 3), ("float32", 1000, 2), ("bfloat16", 4096, 1)]
    monkeypatch.setattr(helion_tune, "points", lambda op, on_gpu=True: sweep)
    assert helion_tune.main(["--store", str(store), "softmax forward", "--n", "257", "4096"]) == 0
    assert tuned == [("float32", 257), ("bfloat16", 257), ("bfloat16", 4096)]
    assert helion_tune.main(["--store", str(store), "softmax forward", "--n", "1000", "--dtypes", "bfloat16"]) == 0
    assert len(tuned) == 3, "a point outside --n or --dtypes was tuned"
    configs = json.loads(store.read_text())[GPU]["configs"]["softmax forward"]
    assert {t: sorted(by_n) for t, by_n in configs.items()} == {"float32": ["257"], "bfloat16": ["257", "4096"]}
