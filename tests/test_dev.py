"""dev/ holds maintained tools only, each described in dev/README.md, and the design record."""

import os
import pathlib
import re
import sys

import pytest

from conftest import ROOT, TUTORIALS, untimed_source


def test_every_tool_in_dev_is_described_in_its_readme():
    readme = (ROOT / "dev" / "README.md").read_text()
    tools = sorted(p.name for p in (ROOT / "dev").iterdir() if p.is_file() and p.name not in ("README.md", "DESIGN.md"))
    assert tools, "dev/ has no tools"
    missing = [name for name in tools if f"| `{name}` |" not in readme]
    assert not missing, f"dev/README.md's table does not describe {missing}"


def test_the_gpu_build_tests_the_site_it_built():
    """dev/gpu_build.sh's tests read the site its `make html` just wrote (SOL_BUILT_SITE at the Makefile's BUILD):
    without it the notebook tests build the whole site again beside the kernel tests, cold on a fresh machine."""
    script = (ROOT / "dev" / "gpu_build.sh").read_text(encoding="utf-8")
    build = re.search(r"^BUILD\s*\?=\s*(\S+)", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)[1]
    (make,) = [ln for ln in script.splitlines() if re.match(r"\s*make html", ln)]
    assert "BUILD=" not in make, make
    (tests,) = [ln for ln in script.splitlines() if "-m pytest" in ln]
    assert re.match(rf"\s*SOL_BUILT_SITE=\$PWD/{build} python3 -m pytest tests ", tests), tests


def test_design_record_is_short_and_names_no_diary_entry():
    """dev/DESIGN.md is a record of the decisions in the code, not a diary: at most 450 lines, and an entry is named by
    its date and commit, never by a numbered work period or tracker ticket (history is git's)."""
    import re

    lines = (ROOT / "dev" / "DESIGN.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 450, f"dev/DESIGN.md has {len(lines)} lines, more than 450: fold, drop what no longer holds"
    diary = re.compile(r"\b[Ss]essions? \d|\b[Ii]ssues? #?\d")
    hits = [f"{number}: {line.strip()[:80]}" for number, line in enumerate(lines, 1) if diary.search(line)]
    assert not hits, "dev/DESIGN.md names diary entries (give a date and a commit instead):\n" + "\n".join(hits)


INTERPRETER_PROBE = """
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl

@triton.jit
def strided(o_ptr, n):  # a persistent loop: its bounds are run-time values
    for i in tl.range(tl.program_id(0), n, tl.num_programs(0)):
        tl.store(o_ptr + i, i)

o = torch.zeros(8, dtype=torch.int32)
strided[(3,)](o, 8)
assert o.tolist() == list(range(8)), o
"""


def _interpreter_runs_persistent_loops():
    """Whether this Triton's interpreter runs a loop whose bounds are run-time values (the persistent kernels').
    Triton 3.6's does not with NumPy 2.4 or newer (a scalar argument is a one-element array there, which NumPy no
    longer turns into an int): the GPU lock pins both, Triton 3.9's interpreter runs it."""
    import os
    import pathlib
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        probe = pathlib.Path(folder) / "probe.py"  # @triton.jit wants its kernel in a file
        probe.write_text(INTERPRETER_PROBE)
        proc = subprocess.run(
            [sys.executable, str(probe)],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
        )
    return proc.returncode == 0, proc.stderr.strip().splitlines()[-1:] or [""]


def test_sanitizer_sweep_runs_its_pages_on_the_cpu():
    """dev/sanitize_sweep.py (run on the GPU under compute-sanitizer) with SWEEP_DEVICE=cpu: each page's drop-in,
    the staged deep dives included (their core kernels here), against torch at a short and a staged row length."""
    import os
    import subprocess
    import sys

    import numpy
    import triton

    runs, why = _interpreter_runs_persistent_loops()
    if not runs:
        pytest.skip(
            f"Triton {triton.__version__}'s interpreter with NumPy {numpy.__version__} cannot run a loop over "
            f"run-time bounds ({why[0][:120]}); the CPU CI runs this test with the Triton requirements.txt installs"
        )
    pages = [
        "04_rms_norm_operator",
        "deep_dives/12_softmax_staged_gluon",
        "deep_dives/22_layer_norm_staged_gluon",
        "deep_dives/42_rms_norm_staged_gluon",
    ]
    # CPU only, on a GPU machine too: the pages choose their device from what torch sees, so it sees none
    env = dict(os.environ, SWEEP_DEVICE="cpu", SWEEP_N="7,16400", CUDA_VISIBLE_DEVICES="")
    env.pop("TRITON_INTERPRET", None)  # each page sets it itself without a GPU
    proc = subprocess.run(
        [sys.executable, str(ROOT / "dev" / "sanitize_sweep.py"), *pages],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if "clean run, matches torch" in line]
    assert any(line.startswith("04_rms_norm_operator: rms_norm float32, N = 7, 16400:") for line in lines), proc.stdout
    for page in pages[1:]:  # the staged pages: bf16, forward, the staged row length only
        assert any(line.startswith(f"{page}: staged") and "bfloat16, N = 16400:" in line for line in lines), proc.stdout


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_untimed_pages_stop_at_the_cell_that_defines_the_timer(path):
    """SOL_TESTS_UNTIMED=1 (dev/sanitize.sh) runs a page up to the cell that defines ``bench``: a whole number of
    cells, everything before that one (the drop-in and its correctness check included), nothing timed."""
    source = path.read_text(encoding="utf-8")
    cut = untimed_source(source)
    assert "\ndef bench(" in source, f"{path.name} defines no bench(): the untimed run would time it whole"
    assert source.startswith(cut) and source[len(cut) :].startswith("# %%\n"), "not cut at a cell"
    assert "bench(" not in cut, "the untimed cells call or define a timer"
    compile(cut, str(path), "exec")  # what the tests run


def test_a_page_runs_its_timed_cells_only_when_a_test_asks_for_what_they_define(tmp_path, monkeypatch):
    """tests/conftest.py's pages: the cells before the timer at load, the rest once, on the first name only the rest
    defines, into the same globals, at the file's own line numbers (Triton reads kernels' source through them)."""
    import conftest

    page = tmp_path / "99_page.py"
    page.write_text(
        "RUNS = []\nKERNEL = 1\n\n# %%\n# Timing\ndef bench(fn):\n    RUNS.append(fn)\n    return 1.0\n\n"
        "TIMED = bench(KERNEL)\n\ndef late():\n    return TIMED\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(conftest, "UNTIMED", False)
    loaded = conftest.load_page(page)
    assert loaded["KERNEL"] == 1 and loaded["RUNS"] == [] and "TIMED" not in loaded.data, "the timer ran at load"
    assert loaded["TIMED"] == 1.0 and loaded["RUNS"] == [1], "the timed cells did not run when asked"
    assert loaded["late"].__code__.co_firstlineno == 12 and loaded["late"]() == 1.0
    assert loaded["RUNS"] == [1], "the timed cells ran twice"
    with pytest.raises(KeyError):
        loaded["NOWHERE"]
    monkeypatch.setattr(conftest, "UNTIMED", True)
    with pytest.raises(pytest.skip.Exception):
        conftest.load_page(page)["TIMED"]


def _counters():
    import importlib.util

    spec = importlib.util.spec_from_file_location("counters", ROOT / "dev" / "counters.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ncu_csv(kernels):
    """ncu's raw CSV page as `ncu --import ... --csv --page raw` prints it: a header, a units row, a row a kernel."""
    import csv
    import io

    metrics = _counters().METRICS
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL)
    writer.writerow(["ID", "Process ID", "Kernel Name", *metrics])
    writer.writerow(["", "", "", "nsecond", "byte", "byte", "%", "%", "", "", "", "register/thread"])
    for i, (name, values) in enumerate(kernels):
        writer.writerow([str(i), "7", name, *(f"{values.get(m, 0):,}" for m in metrics)])
    return out.getvalue()


def test_counters_take_the_points_where_a_row_misses_a_target(tmp_path):
    """--misses: for each row that misses a target, the N of its lowest % of light, its worst ratio to the best peer
    and its worst ratio to Helion's kernel; a row that meets every target gives none."""
    import pandas as pd

    rows = [("forward", "float32", n, light, peer, 1) for n, light, peer in ((256, 95.0, 1.1), (1024, 97.0, 1.05))]
    rows += [("forward", "bfloat16", n, light, peer, 1) for n, light, peer in ((256, 99.0, 1.2), (1024, 98.0, 1.1))]
    frame = pd.DataFrame(
        rows, columns=["direction", "dtype", "N", "ours, % of light", "ours / best peer", "recommended"]
    )
    frame.assign(**{"ours / Helion": [1.1, 1.0, 1.0, 0.95]}).to_csv(tmp_path / "01_fused_softmax.csv", index=False)
    assert _counters().missed_points(tmp_path) == {"01_fused_softmax": {("bfloat16", 1024)}}
    frame.assign(**{"ours / Helion": 1.0}).to_csv(tmp_path / "01_fused_softmax.csv", index=False)
    assert _counters().missed_points(tmp_path) == {}


def test_counters_fall_to_their_calls_and_sum_over_each_calls_kernels():
    """A marker kernel (grid = the call's number) opens each call; a call's kernels sum their time and DRAM bytes,
    weight DRAM busy and warps active by time; a call with no kernel (a cudaMemcpy copy) is no entry; the page's name
    for its kernel becomes "ours"; the last of two calls named alike wins; the copy kernel comes last; a call the page
    names not at all is no peer."""
    counters = _counters()
    marker = lambda n: (counters.MARKER, {"launch__grid_size": n})
    k = lambda ns, rd, wr, pct, warps, grid=100: {
        "gpu__time_duration.sum": ns,
        "dram__bytes_read.sum": rd,
        "dram__bytes_write.sum": wr,
        "dram__throughput.avg.pct_of_peak_sustained_elapsed": pct,
        "sm__warps_active.avg.pct_of_peak_sustained_active": warps,
        "launch__waves_per_multiprocessor": grid / 132,
        "launch__grid_size": grid,
        "launch__block_size": 128,
        "launch__registers_per_thread": 32,
    }
    text = _ncu_csv(
        [
            marker(1),
            ("elementwise_kernel", k(10_000, 1000, 1000, 90, 80)),
            marker(2),  # the page's light: a cudaMemcpy, no kernel
            marker(3),
            ("split_kernel", k(5_000, 500, 0, 50, 20)),  # a ladder step the page left named as the split
            marker(4),
            ("split_kernel", k(30_000, 1000, 0, 60, 40)),
            ("combine_kernel", k(10_000, 0, 1000, 100, 60, 264)),
            marker(5),
            ("triton_per_fused_softmax_0", k(20_000, 1000, 1000, 95, 70)),
        ]
    )
    record = lambda call, label, direction, function, line: {
        "call": call,
        "label": label,
        "direction": direction,
        "dtype": "bfloat16",
        "N": 65536,
        "x_bytes": 1000,
        "function": function,
        "line": line,
    }
    calls = [
        record(1, "copy kernel", None, "sweep", 9),
        record(2, None, None, "sweep", 9),
        record(3, "split", "forward", "<module>", 9),
        record(4, "split", "forward", "<module>", 12),
        record(5, "torch.compile", "forward", "<module>", 12),
    ]
    kernels = counters.read_report(text)
    assert [x["name"] for x in kernels][:2] == [counters.MARKER, "elementwise_kernel"]
    (point,) = counters.points_of("11_softmax_long_rows", calls, counters.assign(kernels, calls))
    assert (point["page"], point["direction"], point["dtype"], point["N"]) == (
        "11_softmax_long_rows",
        "forward",
        "bfloat16",
        65536,
    )
    ours, compiled, copy = point["calls"]
    assert (ours["label"], compiled["label"], copy["label"]) == ("ours", "torch.compile", "copy kernel")
    assert ours["kernels"] == 2 and ours["us"] == 40 and ours["dram_bytes"] == 2000
    assert ours["dram_pct"] == round((60 * 30 + 100 * 10) / 40, 1)
    assert ours["warps_active_pct"] == round((40 * 30 + 60 * 10) / 40, 1)
    assert ours["waves"] == round(100 / 132, 2) and ours["grid"] == 100  # of its longest kernel
    assert compiled["us"] == 20 and copy["us"] == 10 and copy["dram_pct"] == 90
    # a call on a smaller x (a check on a few rows) is another experiment: left out, ours from the sweep kept
    more = counters.read_report(_ncu_csv([marker(6), ("split_kernel", k(1_000, 10, 10, 5, 5))]))
    small = [*calls, {**calls[3], "call": 6, "x_bytes": 10}]
    (point,) = counters.points_of("11_softmax_long_rows", small, counters.assign(kernels + more, small))
    assert [c["label"] for c in point["calls"]] == ["ours", "torch.compile", "copy kernel"]
    assert point["calls"][0]["us"] == 40
    # one label timed twice from one line at one point (a ladder's steps where a loop left the label set): those
    # calls are left out and the log says so; the label's call from another line and the other calls are kept
    twice, said = [*calls, {**calls[3], "call": 6}], []
    page, assigned = "11_softmax_long_rows", counters.assign(kernels + more, twice)
    (point,) = counters.points_of(page, twice, assigned, log=said.append)
    assert [c["label"] for c in point["calls"]] == ["ours", "torch.compile", "copy kernel"]
    assert point["calls"][0]["us"] == 5  # call 3's, from line 9
    assert len(said) == 1 and "split timed twice at line 12" in said[0]
    # every label timed twice from its line (rows and columns of one loop): the point is left out
    both = [calls[0], calls[4], {**calls[4], "call": 6}]
    said = []
    assert counters.points_of(page, both, counters.assign(kernels + more, both), log=said.append) == []
    assert len(said) == 1 and "torch.compile timed twice" in said[0]
    # calls the page names not at all, timed twice from one line (a ladder's steps), are left out, the point kept;
    # a label ending "(ours)" (05's "Pallas (ours)") is ours
    unnamed = {**calls[3], "label": None, "function": "measure_ladder", "line": 30}
    ladder = [
        calls[0],
        {**unnamed, "call": 3},
        {**calls[3], "label": "Pallas (ours)"},
        calls[4],
        {**unnamed, "call": 6},
    ]
    (point,) = counters.points_of("05_jax_rms_norm", ladder, counters.assign(kernels + more, ladder))
    assert [c["label"] for c in point["calls"]] == ["ours", "torch.compile", "copy kernel"]
    # ours running the very kernels of a peer (a fallback, or the peer's call profiled as ours) is logged
    same = counters.read_report(_ncu_csv([marker(6), ("triton_per_fused_softmax_0", k(20_000, 1000, 1000, 95, 70))]))
    fallback, said = [calls[0], calls[4], {**calls[3], "call": 6, "line": 40}], []
    (point,) = counters.points_of(page, fallback, counters.assign(kernels + same, fallback), log=said.append)
    assert [c["label"] for c in point["calls"]] == ["torch.compile", "ours", "copy kernel"]
    assert len(said) == 1 and "ours ran the same kernels as torch.compile" in said[0], said
    said = []
    counters.points_of(page, calls, counters.assign(kernels, calls), log=said.append)
    assert said == []  # ours' own kernels: nothing said
    # one call the page names not at all, in a helper (03's light in yardsticks, 06's ladder step), is no peer: left out
    once = [calls[0], {**unnamed, "call": 3, "function": "yardsticks"}, calls[3], calls[4]]
    (point,) = counters.points_of(page, once, counters.assign(kernels + more, once))
    assert [c["label"] for c in point["calls"]] == ["ours", "torch.compile", "copy kernel"]


def test_counters_profile_a_call_timed_in_rounds_once_and_a_call_on_other_arguments_again():
    """A page that times each call several rounds (05's JAX pages) is profiled once a call; the same line on another
    tensor of the point (31's rows, then its columns) is profiled again, so that points_of can leave it out."""
    import torch

    profiler = _counters().Profiler({("float32", 64)}, use_range=False)
    rows, columns = torch.ones(8, 64), torch.ones(4, 64)
    profiler.cuda, calls = False, []
    for x in (rows, columns):
        runs = {"ours": (torch.sum, (x,))}
        for _ in range(3):  # rounds
            for provider, (fn, args) in runs.items():  # noqa: B007  the profiler reads `provider` from this frame
                calls.append(profiler.bench(fn, *args))
    labelled = [(c["label"], c["x_bytes"]) for c in profiler.calls]
    assert labelled == [
        ("copy kernel", 8 * 64 * 4),
        ("ours", 8 * 64 * 4),
        ("copy kernel", 4 * 64 * 4),
        ("ours", 4 * 64 * 4),
    ], labelled
    assert len(calls) == 6


def test_counters_name_a_call_timed_in_a_helper_by_the_frame_that_handed_it_over():
    """51's and 52's beside_copy times the page's copy and the provider it is handed on one line: the copy is named
    copy, the provider's call by the loop that handed it over (one holding its function or an argument); a frame that
    holds neither, or holds two names (one left from an earlier loop), lends none."""
    import torch

    counters = _counters()
    profiler, x = counters.Profiler({("float32", 64)}, use_range=False), torch.ones(8, 64)
    profiler.cuda = False
    scope = {"bench": profiler.bench, "copy": torch.clone, "x": x, "torch": torch}
    page = (
        "def beside_copy(fn, args, x):\n"
        "    return [(bench(copy, x), bench(fn, *args)) for _ in range(3)]\n"
        "providers = {'XLA': torch.sum, 'ours': torch.mean}\n"
        "timed = {provider: beside_copy(fn, (x,), x) for provider, fn in providers.items()}\n"
        "name = 'a name left from an earlier loop'\n"
        "def ladder():\n"
        "    launch = lambda: torch.neg(x)\n"
        "    return bench(launch)\n"
        "ladder()\n"
        "def named(provider):\n"
        "    return beside_copy(torch.amax, (x,), x)\n"
        "named('one name')\n"
    )
    exec(compile(page, str(ROOT / "tutorials" / "a_page.py"), "exec"), scope)
    labelled = [c["label"] for c in profiler.calls]
    assert labelled == ["copy kernel", "copy", "XLA", "ours", None, None], labelled


def test_counters_store_each_page_as_it_finishes(tmp_path, monkeypatch):
    """A run cut short (a GPU call's time limit, in the page after) keeps the points of the pages it finished: each
    page's points are stored when its profile is read."""
    import json
    import subprocess
    import types

    import torch

    counters, out = _counters(), tmp_path / "counters.json"
    call = {"label": "ours", "kernels": 1, "us": 1.0, "dram_bytes": 2, "x_bytes": 1, "dram_pct": 80.0}
    call |= {"warps_active_pct": 50.0, "waves": 1.0}
    point = lambda stem: {"page": stem, "direction": None, "dtype": "float32", "N": 512, "calls": [call]}  # noqa: E731

    def profile_page(stem, points, ncu, work, timeout):
        if stem == "02_layer_norm":  # the first page's point is on disk before the second page runs
            assert [p["page"] for p in json.loads(out.read_text())["Test GPU"]["points"]] == ["01_fused_softmax"]
            raise KeyboardInterrupt  # the call's time limit
        return [], []

    monkeypatch.setattr(counters, "find_ncu", lambda: "ncu")
    monkeypatch.setattr(counters, "profile_page", profile_page)
    monkeypatch.setattr(counters, "points_of", lambda stem, calls, kernels: [point(stem)])
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: types.SimpleNamespace(stdout="NVIDIA (R) Nsight 2025.3\n"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test GPU")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: types.SimpleNamespace(multi_processor_count=7))
    with pytest.raises(KeyboardInterrupt):
        counters.main(
            ["01_fused_softmax:float32:512", "02_layer_norm:float32:512", "--out", str(out), "--work", str(tmp_path)]
        )
    stored = json.loads(out.read_text())["Test GPU"]
    assert [p["page"] for p in stored["points"]] == ["01_fused_softmax"]
    assert stored["sms"] == 7, "the GPU's SM count, for the landing page's warps an SM"


def test_counters_give_each_page_what_is_left_of_the_budget(tmp_path, monkeypatch):
    """--budget bounds the whole run: each page runs under the smaller of --timeout and the budget left, a page cut
    there is reported and the next one runs, and no page starts with under MIN_PAGE_SECONDS left; a page the counters
    cannot reach is not run."""
    import subprocess
    import types

    counters, clock, given = _counters(), [0.0], []

    def profile_page(stem, points, ncu, work, timeout):
        given.append((stem, timeout))
        clock[0] += 70 if stem == "01_fused_softmax" else timeout
        if stem == "02_layer_norm":
            raise RuntimeError(f"{stem}: cut at {timeout:.0f} s")
        return [], []

    monkeypatch.setattr(counters, "find_ncu", lambda: "ncu")
    monkeypatch.setattr(counters, "profile_page", profile_page)
    monkeypatch.setattr(counters, "points_of", lambda stem, calls, kernels: [])
    monkeypatch.setattr(counters.time, "time", lambda: clock[0])
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: types.SimpleNamespace(stdout="NVIDIA (R) Nsight 2025.3\n"))
    pages = ["01_fused_softmax", "02_layer_norm", "04_rms_norm", "06_cross_entropy"]
    out = ["--work", str(tmp_path), "--out", str(tmp_path / "c.json")]
    args = [f"{stem}:float32:512" for stem in pages] + ["--timeout", "60", "--budget", "150"]
    assert counters.main(args + out) == 1
    assert given == [("01_fused_softmax", 60), ("02_layer_norm", 60), ("04_rms_norm", 20)], given
    given.clear()  # 62 times its calls in its ranks, which the counters cannot reach (sol_results.NOT_COUNTED)
    assert counters.main(["62_cross_entropy_vocab_parallel:bfloat16:128256", *out]) == 0 and given == []


def test_counters_cut_a_page_with_the_processes_it_started(tmp_path):
    """A page past its time is stopped with what ncu started under it: no page left running on the GPU beside the
    next page's profile."""
    import pathlib
    import time

    pids, ncu = tmp_path / "pids", tmp_path / "ncu"
    ncu.write_text(f"#!/bin/sh\nsleep 60 &\necho $$ $! > {pids}\nwait\n")  # ncu's stand-in and the app it starts
    ncu.chmod(0o755)
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="cut at 1 s"):
        _counters().profile_page("01_fused_softmax", {("float32", 512)}, str(ncu), tmp_path, 1)
    assert time.monotonic() - began < 30
    time.sleep(0.2)
    for pid in map(int, pids.read_text().split()):
        stat = pathlib.Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] in "ZX", f"{pid} still runs"


def test_counters_stored_again_replace_only_their_points(tmp_path):
    """A run at a few points keeps the GPU's other stored points and replaces those it measured again."""
    import json

    store, path = _counters().store, tmp_path / "counters.json"
    point = lambda page, n, us: {"page": page, "direction": None, "dtype": "bfloat16", "N": n, "calls": [{"us": us}]}
    store(path, "GPU", {"measured": "1", "points": [point("01_a", 512, 1.0), point("02_b", 512, 2.0)]})
    store(path, "OTHER", {"measured": "1", "points": [point("01_a", 512, 9.0)]})
    store(path, "GPU", {"measured": "2", "points": [point("02_b", 512, 3.0), point("02_b", 1024, 4.0)]})
    data = json.loads(path.read_text())
    assert data["GPU"]["measured"] == "2"
    assert [(p["page"], p["N"], p["calls"][0]["us"]) for p in data["GPU"]["points"]] == [
        ("01_a", 512, 1.0),
        ("02_b", 512, 3.0),
        ("02_b", 1024, 4.0),
    ]
    assert data["OTHER"]["points"][0]["calls"][0]["us"] == 9.0


def test_counters_take_a_pages_global_for_a_label_only_inside_the_loop_that_binds_it(tmp_path):
    """At a page's top level a loop's variable outlives the loop: a call timed after it (24's light, timed before its
    next point's providers) is not the last provider's, and a call in a comprehension or a loop that binds the name
    is. Ours is the provider a page's "<name>, % of light" column is computed from (24's "design 2": "2: persistent")
    """
    import torch

    counters = _counters()
    profiler, x = counters.Profiler({("float32", 64)}, use_range=False), torch.ones(8, 64)
    profiler.cuda = False
    page = tmp_path / "a_page.py"
    page.write_text(
        "for n in range(2):\n"
        "    bench(lambda: torch.clone(x))\n"
        "    for name, fn in {'torch': torch.sum, 'ours': torch.mean}.items():\n"
        "        bench(lambda: fn(x))\n"
        "timed = {key: bench(fn, x) for key, fn in {'quack': torch.amax}.items()}\n"
    )
    exec(compile(page.read_text(), str(page), "exec"), {"bench": profiler.bench, "x": x, "torch": torch})
    labelled = {(c["label"], c["line"]) for c in profiler.calls if c["label"] != "copy kernel"}
    assert labelled == {(None, 2), ("torch", 4), ("ours", 4), ("quack", 5)}, labelled
    assert counters.ours_label("24_layer_norm_backward_locks") == "2: persistent"
    assert counters.ours_label("11_softmax_long_rows") == "split" and counters.ours_label("01_fused_softmax") == "ours"


def test_counters_tool_finds_the_calls_a_page_times_at_a_point_on_the_cpu(tmp_path):
    """dev/counters.py --no-ncu runs a page cell by cell with its timer replaced and lists the calls it would profile
    at the asked point, each named by the page's own variable: a function's sweep (01) and a top-level loop that
    reads its tensors as globals, two directions (11); the page's lists of sizes shrink to the asked N."""
    import json
    import os
    import subprocess
    import sys

    import numpy
    import triton

    version = lambda module: tuple(int(p) for p in module.__version__.split(".")[:2])  # noqa: E731
    if version(triton) < (3, 8) and version(numpy) >= (2, 4):
        pytest.skip(
            f"Triton {triton.__version__}'s interpreter converts a one-element array to an int, which NumPy "
            f"{numpy.__version__} refuses: the pages' kernels cannot run on the CPU here (requirements-reader.txt)"
        )

    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "dev" / "counters.py"),
            "--no-ncu",
            "--work",
            str(tmp_path),
            "01_fused_softmax:float32:1024",
            "11_softmax_long_rows:float32:65536",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    first = json.loads((tmp_path / "01_fused_softmax.calls.json").read_text())
    assert {(c["label"], c["dtype"], c["N"]) for c in first} >= {
        ("copy kernel", "float32", 1024),
        ("torch", "float32", 1024),
        ("ours", "float32", 1024),
    }
    assert all(c["N"] == 1024 for c in first) and all(c["x_bytes"] == 32 * 1024 * 4 for c in first)
    long_rows = json.loads((tmp_path / "11_softmax_long_rows.calls.json").read_text())
    assert {(c["label"], c["direction"]) for c in long_rows} >= {
        ("split", "forward"),
        ("split", "backward"),
        ("torch", "forward"),
        ("torch", "backward"),
    }


def test_profiled_pages_run_as_the_build_runs_them():
    """dev/profile_pages.py gives each page the build's Triton cache folder and Helion's stored configs, with no
    Helion search (a profile that autotuned would time the search), unless the caller set them."""
    sys.path.insert(0, str(ROOT / "dev"))
    try:
        import profile_pages
    finally:
        sys.path.remove(str(ROOT / "dev"))
    env = profile_pages.child_env({"PATH": "/bin"})
    assert env["SOL_HELION_AUTOTUNE"] == "0" and env["MPLBACKEND"] == "Agg" and env["PATH"] == "/bin"
    assert env["TRITON_CACHE_DIR"].endswith(os.path.join(".triton", "cache"))
    assert pathlib.Path(env["SOL_HELION_CONFIGS"]) == ROOT / "docs" / "helion_configs.json"
    mine = profile_pages.child_env({"SOL_HELION_AUTOTUNE": "1", "TRITON_CACHE_DIR": "/tmp/t"})
    assert mine["SOL_HELION_AUTOTUNE"] == "1" and mine["TRITON_CACHE_DIR"] == "/tmp/t"
