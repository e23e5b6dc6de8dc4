"""How the build runs the pages (docs/_ext/sol_build.py): each in a process of its own, so that one page cannot
break the pages after it; a warm-up pass that compiles every page before any is timed; and the pages' timers,
which must run what they time once, eagerly, before they capture it in a CUDA graph."""

import ast
import collections
import gc
import hashlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, TUTORIALS

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import sol_build  # noqa: E402


# ---- a function in a child process ----

_STATE = {"poisoned": False}


def _poison_and_return(value):
    _STATE["poisoned"] = True
    return value * 2


def _raise():
    raise KeyError("from the child")


def _die():
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_child_returns_its_value_and_leaves_the_parent_as_it_was():
    assert sol_build.run_in_child(_poison_and_return, 21) == 42
    assert _STATE["poisoned"] is False, "state the child changed reached the parent"


def test_a_childs_exception_is_raised_in_the_parent():
    with pytest.raises(KeyError, match="from the child"):
        sol_build.run_in_child(_raise)


def _frozen_count():
    return gc.get_freeze_count()


def test_a_child_does_not_scan_what_it_inherited():
    """The parent's objects (torch, Triton, ... in a build: millions) are frozen before the fork, so a collection in
    the page's process looks only at what the page made (0.4 s a gc.collect otherwise, twice a page)."""
    ballast = [[i] for i in range(300_000)]  # objects the parent holds, as a build holds its imports
    frozen = sol_build.run_in_child(_frozen_count)
    assert frozen >= len(ballast), (
        f"the child inherited {frozen} frozen objects, fewer than the parent's {len(ballast)}"
    )
    assert gc.get_freeze_count() == 0, "the parent stays frozen: its own garbage would never be collected"
    del ballast


def test_a_child_that_dies_is_reported_not_waited_for():
    with pytest.raises(ChildProcessError, match="SIGKILL"):
        sol_build.run_in_child(_die)


# ---- a whole gallery: a page that breaks its process cannot break the next ----

CONF = """
import os, sys
sys.path.insert(0, {ext!r})
extensions = ["sphinx_gallery.gen_gallery", "sol_build"]
sphinx_gallery_conf = {{"examples_dirs": ["examples"], "gallery_dirs": ["gallery"], "filename_pattern": "/p",
                       "within_subsection_order": "FileNameSortKey", "abort_on_example_error": False,
                       "only_warn_on_example_error": True}}
html_theme = "basic"
"""

FIRST = '''"""
First
=====

Leaves this process in a state no later page may find, then, where told to, kills its own process.
"""
import os, signal, sys
sys.first_page_was_here = True
os.environ["FIRST_PAGE_WAS_HERE"] = "1"
if os.path.exists(os.path.join(os.environ["GALLERY_ROOT"], "die")):
    os.kill(os.getpid(), signal.SIGKILL)
'''

SECOND = '''"""
Second
======

Runs in a clean process.
"""
import os, sys
assert not hasattr(sys, "first_page_was_here"), "the first page's process state reached this page"
assert "FIRST_PAGE_WAS_HERE" not in os.environ
print("second page ran clean")
import time, timeit
sys.path.insert(0, os.environ["GALLERY_ROOT"])
import fresh_module  # written by the test, never imported before: compiled from its source here
# %%
timeit.repeat(lambda: time.sleep(0.3), number=1, repeat=2)  # the build's log counts this timer's calls
'''


def _gallery(tmp_path):
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "README.txt").write_text("Examples\n========\n")
    (tmp_path / "examples" / "p1_first.py").write_text(FIRST)
    (tmp_path / "examples" / "p2_second.py").write_text(SECOND)
    (tmp_path / "fresh_module.py").write_text("VALUE = 1\n")
    (tmp_path / "conf.py").write_text(CONF.format(ext=str(ROOT / "docs" / "_ext")))
    (tmp_path / "index.rst").write_text("Test\n====\n\n.. toctree::\n\n   gallery/index\n")
    return tmp_path


def _build(root, quiet=True, **more):
    # Triton's cache folder holds the warm-up's stamps and the record of pages' seconds: the test's own
    env = {**os.environ, "GALLERY_ROOT": str(root), "SOL_WARMUP": "0", "TRITON_CACHE_DIR": str(root / ".triton")}
    env.update(more)
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", *(["-q"] if quiet else []), str(root), str(root / "_build")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_each_page_runs_in_a_clean_process(tmp_path):
    root = _gallery(tmp_path)
    proc = _build(root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    second = (root / "gallery" / "p2_second.rst").read_text()
    assert "second page ran clean" in second, "the second page did not run, or not cleanly"


def test_the_log_says_where_a_pages_time_went(tmp_path):
    proc = _build(_gallery(tmp_path), quiet=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("page p2_second:"))
    timers = re.search(
        r"code ([\d.]+) s in (\d+) cells; timers ([\d.]+) s in (\d+) calls(?:, [^;]*)?; slowest cells: "
        r"line (\d+) ([\d.]+) s",
        line,
    )
    assert timers, line
    code, n_cells, *timers = timers.groups()
    assert n_cells == "2" and float(code) >= float(timers[0]), line  # the page's two code blocks hold the timer
    seconds, calls, slowest, slowest_seconds = timers
    assert float(seconds) >= 0.6 and calls == "1", line  # two sleeps of 0.3 s, in one call of the timer
    assert SECOND.splitlines()[int(slowest) - 1].startswith("timeit.repeat"), line  # the cell that timed
    assert float(slowest_seconds) >= 0.6, line
    loads = re.search(r"modules compiled from source (\d+) in ([\d.]+) s; Triton compiles (\d+) in ([\d.]+) s", line)
    assert loads and int(loads[1]) >= 1 and loads[3] == "0", line  # the page's fresh module; no kernel


class _Source:  # as triton.compiler.compile gets it: an ASTSource holds the @triton.jit function, and hashes
    def __init__(self, name, key):
        self.fn, self.key = type("JITFunction", (), {"__name__": name})(), key

    def hash(self):
        return self.key * 8


def test_the_log_names_the_kernels_that_compiled_slowly_and_what_the_warm_up_did(monkeypatch):
    """A kernel found in Triton's cache loads in milliseconds; one that took longer was compiled in the timed page,
    and the line names it and says what the page's warm-up compiled of it: why the cache did not have it."""
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    none = hashlib.sha256(b"None").hexdigest()[:8]  # no options given
    assert sol_build.kernel_key(_Source("ln_fwd", "ab")) == f"ln_fwd abababababababab-{none} ~/.triton/cache"
    assert sol_build.kernel_key("/tmp/k.ttgir") == f"k.ttgir ?-{none} ~/.triton/cache"  # a file of IR: no hash
    four, eight = (sol_build.kernel_key(_Source("ln_fwd", "ab"), {"num_warps": w}) for w in (4, 8))
    assert four != eight and four.split(" ")[1].startswith("abababababababab-"), (four, eight)  # options count
    monkeypatch.setenv("TRITON_CACHE_DIR", "/tmp/torchinductor_root/triton/0")  # as Inductor sets it
    assert sol_build.kernel_key(_Source("ln_fwd", "ab")).endswith(f"-{none} /tmp/torchinductor_root/triton/0")
    warmed = ["ln_fwd 1111 /a", "ln_bwd 2222 /a", ""]
    assert sol_build.warm_up_had("ln_fwd 1111 /a", warmed) == "the warm-up compiled the same"
    assert sol_build.warm_up_had("ln_fwd 1111 /b", warmed) == (
        "the warm-up compiled the same into /a, this page looked in /b"
    )
    assert sol_build.warm_up_had("ln_bwd 3333 /a", warmed) == "the warm-up compiled it for other arguments"
    assert sol_build.warm_up_had("sum_kernel 4444 /a", warmed) == "not in the warm-up"
    assert sol_build.warm_up_had("sum_kernel 4444 /a", None) == ""  # no record: nothing said
    slow = [(1.25, "ln_fwd 1111 /a", "not in the warm-up"), (0.31, "triton_red_fused_0 5555 /a", ""), (0.004, "c", "")]
    line = sol_build.where_the_time_went([(10, 2.0)], (1.0, 3), ((0.0, 0), (1.6, 69), slow))
    assert line.endswith(
        "Triton compiles 69 in 1.6 s; slowest: ln_fwd 1.2 s (not in the warm-up), triton_red_fused_0 0.3 s"
    ), line
    warm = sol_build.where_the_time_went([(10, 2.0)], (1.0, 3), ((0.0, 0), (0.3, 69), [(0.004, "copy 6 /a", "")]))
    assert warm.endswith("Triton compiles 69 in 0.3 s"), warm  # all found in the cache: no name


COMPILING = """
import triton
import triton.compiler

class Source:
    fn = type("JITFunction", (), {"__name__": "ln_fwd"})()

    def hash(self):
        return "cd" * 8

for compile_ in (triton.compiler.compile, triton.compile):
    try:
        compile_(Source(), target=None, options={"num_warps": 4})  # recorded, then no such source to compile
    except Exception:
        pass
"""


def test_a_warm_up_records_each_kernel_it_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    page = tmp_path / "01_compiles.py"
    page.write_text(COMPILING)
    (tmp_path / "01_compiles.compiled").write_text("old line\n")  # an earlier warm-up's record: replaced
    assert sol_build.warm_up([page], jobs=1, log=lambda line: None, record=tmp_path)["01_compiles"][1] == 0
    options = hashlib.sha256(repr([("num_warps", 4)]).encode()).hexdigest()[:8]
    assert (tmp_path / "01_compiles.compiled").read_text().split("\n") == [
        f"ln_fwd cdcdcdcdcdcdcdcd-{options} {tmp_path / 'triton'}",  # triton.compiler.compile, as a kernel calls it
        f"ln_fwd cdcdcdcdcdcdcdcd-{options} {tmp_path / 'triton'}",  # triton.compile, as Inductor calls it
        "",
    ]


def _compile_in_page(fname, src):  # what a page's kernel does at its first call, in the timed pass's process
    import triton
    import triton.compiler

    for compile_ in (triton.compiler.compile, triton.compile):
        try:
            compile_(src, target=None, options={"num_warps": 4})
        except Exception:  # no such source to compile
            pass
    return "page done"


def test_the_timed_page_reads_only_this_builds_warm_up_record(tmp_path, monkeypatch):
    """_profiled names each compile with what the page's warm-up compiled of it, from the record this build's
    warm-up wrote; without one (SOL_WARMUP_RECORDS unset: no warm-up this build), it says nothing of the warm-up."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    src = _Source("ln_fwd", "cd")
    key = sol_build.kernel_key(src, {"num_warps": 4})
    (tmp_path / "01_page.compiled").write_text(key + "\n")
    monkeypatch.setenv("SOL_WARMUP_RECORDS", str(tmp_path))
    import triton.compiler  # noqa: F401  (as the build's process imports it before the pages: PREIMPORT)

    result, _, _, (_, (_, count), slow) = sol_build.run_in_child(
        sol_build._profiled, _compile_in_page, "01_page.py", src
    )
    assert result == "page done" and count == 2, (result, count)
    assert [(k, why) for _, k, why in slow] == [(key, "the warm-up compiled the same")] * 2, slow
    monkeypatch.delenv("SOL_WARMUP_RECORDS")
    *_, (_, _, slow) = sol_build.run_in_child(sol_build._profiled, _compile_in_page, "01_page.py", src)
    assert [why for *_, why in slow] == ["", ""], slow


def test_the_warm_up_logs_what_a_page_did_not_measure():
    output = "\n".join(
        [
            "At N = 512 step 1 ran 1.49x as fast as step 0.",
            "Helion ('float32', 4096) not measured: no config tuned on NVIDIA H200 for this point, and "
            "SOL_HELION_AUTOTUNE=0",
            "quack: not measured here (AssertionError: Scalars are not close! Expected 12.4 but got nan.",
            "Not measured at N = [65536]: Liger: OutOfMemoryError: CUDA out of memory.",
        ]
    )
    assert sol_build.unmeasured(output) == [  # the Helion line is the same in the timed pass: no search there either
        "quack: not measured here (AssertionError: Scalars are not close! Expected 12.4 but got nan.",
        "Not measured at N = [65536]: Liger: OutOfMemoryError: CUDA out of memory.",
    ]
    assert len(sol_build.unmeasured("not measured " + "x" * 300)[0]) == 160
    assert sol_build.unmeasured("\n".join(["Not measured: a"] * 9)) == ["Not measured: a"] * 5


def test_a_warm_up_that_could_not_measure_a_call_says_so(tmp_path):
    page = tmp_path / "01_peer.py"
    page.write_text('print("Liger: not measured here (OutOfMemoryError: CUDA out of memory)")\n')
    lines = []
    assert sol_build.warm_up([page], jobs=1, log=lines.append)["01_peer"][1] == 0
    assert "warm-up: 01_peer said: Liger: not measured here (OutOfMemoryError: CUDA out of memory)" in lines, lines


def test_a_page_whose_process_dies_fails_alone(tmp_path):
    root = _gallery(tmp_path)
    (root / "die").write_text("")
    proc = _build(root)
    log = proc.stdout + proc.stderr
    assert "p1_first" in log and "died" in log and "SIGKILL" in log, log[-3000:]
    assert "second page ran clean" in (root / "gallery" / "p2_second.rst").read_text(), log[-3000:]


# ---- the timed pass: pages side by side, their timers taking turns ----

SIDE_BY_SIDE = '''"""
Page {n}
========

Works on the GPU outside its timer, then times, noting when each ran.
"""
import os, time, timeit
def note(kind, start):
    with open(os.path.join(os.environ["GALLERY_ROOT"], "spans_{n}"), "a") as f:
        f.write(f"{{kind}} {{start}} {{time.time()}}\\n")
start = time.time()
time.sleep({pause})  # a page's checks, on the GPU
note("work", start)
# %%
def timed():
    start = time.time()
    time.sleep(0.2)
    note("timer", start)
timeit.repeat(timed, number=1, repeat=2)
print("page {n} timed")
'''


def _spans(lines, page):
    return [(kind, float(a), float(b), page) for kind, a, b in (line.split() for line in lines)]


def _overlap(x, y):
    return x[1] < y[2] and y[1] < x[2]


def _side_by_side_gallery(tmp_path, *pauses):
    """_gallery with its two pages replaced by SIDE_BY_SIDE pages p1_side, p2_side, ..., one a pause (seconds)."""
    root = _gallery(tmp_path)
    for name in ("p1_first.py", "p2_second.py"):
        (root / "examples" / name).unlink()
    for n, pause in enumerate(pauses, 1):
        (root / "examples" / f"p{n}_side.py").write_text(SIDE_BY_SIDE.format(n=n, pause=pause))
    return root


def test_pages_run_side_by_side_and_take_turns_on_the_gpu(tmp_path):
    """With SOL_TIMED_JOBS=3 the timed pass starts the pages sphinx-gallery asks for next ahead of it; a timer has
    the GPU alone, so no page's code runs while another page times, and the pages' work outside their timers runs
    side by side; each page is rendered with its output, and the log says what each waited for its turn and the
    pass's wall time. The first page is the slowest: the others end before sphinx-gallery asks for them (their
    checksums written), and are still reported as run."""
    root = _side_by_side_gallery(tmp_path, 1.5, 0.5, 0.5)
    proc = _build(root, quiet=False, SOL_TIMED_JOBS="3")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    spans = []
    for n in (1, 2, 3):
        assert f"page {n} timed" in (root / "gallery" / f"p{n}_side.rst").read_text()
        spans += _spans((root / f"spans_{n}").read_text().splitlines(), n)
    assert len(spans) == 9, spans
    timers, work = [s for s in spans if s[0] == "timer"], [s for s in spans if s[0] == "work"]
    clashes = [(t, s) for t in timers for s in spans if s is not t and s[3] != t[3] and _overlap(t, s)]
    assert not clashes, f"a page ran beside another's timer: {clashes}"
    assert any(_overlap(a, b) for a in work for b in work if a[3] < b[3]), f"no two pages' work side by side: {work}"
    assert re.search(r"phase timed pages: [\d.]+ s for 3 pages, 3 at a time: [\d.]+ s", proc.stdout), proc.stdout[
        -3000:
    ]
    assert "more waiting for the GPU's turn" in proc.stdout, proc.stdout[-3000:]
    for n in (1, 2, 3):
        line = rf"^page p{n}_side: [\d.]+ s in its own process \(\+[\d]+ s to \+[\d]+ s of the pass\); code .*"
        line += r"[\d.]+ s holding it alone, [\d.]+ s sharing it"
        assert re.search(line, proc.stdout, re.M), proc.stdout[-3000:]
    assert "did not ask for" not in proc.stdout + proc.stderr


def test_pages_in_a_subsection_start_ahead_too(tmp_path):
    """The pages started ahead come from the whole gallery: a subsection's page starts while the top folder's last
    page still runs (two at a time), not after sphinx-gallery has moved on to the subsection."""
    root = _side_by_side_gallery(tmp_path, 2.0)
    (root / "examples" / "deeper").mkdir()
    (root / "examples" / "deeper" / "README.txt").write_text("Deeper\n------\n")
    (root / "examples" / "deeper" / "p2_side.py").write_text(SIDE_BY_SIDE.format(n=2, pause=0.3))
    proc = _build(root, quiet=False, SOL_TIMED_JOBS="2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "page 2 timed" in (root / "gallery" / "deeper" / "p2_side.rst").read_text()
    first, second = (_spans((root / f"spans_{n}").read_text().splitlines(), n) for n in (1, 2))
    work = [s for s in first if s[0] == "work"][0]
    assert min(s[1] for s in second) < work[2], f"the subsection's page waited for the top folder's: {first, second}"
    assert "did not ask for" not in proc.stdout + proc.stderr
    assert proc.stdout.count("page p2_side:") == 1, proc.stdout[-3000:]


def test_the_timed_pass_starts_the_longest_pages_first_and_records_their_seconds(tmp_path):
    """With the last pass's seconds on record (beside the warm-up's stamps), the pages started ahead go longest first:
    two at a time, page 3 (the longest on record) starts beside page 1, before page 2. The pass then records each
    page's seconds for the next."""
    root = _side_by_side_gallery(tmp_path, 1.0, 0.3, 0.3)
    folder = root / ".triton" / "sol-warm-up"
    sol_build.record_page_seconds({"p1_side": 5.0, "p2_side": 1.0, "p3_side": 9.0}, folder)
    proc = _build(root, quiet=False, SOL_TIMED_JOBS="2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    starts = {n: min(s[1] for s in _spans((root / f"spans_{n}").read_text().splitlines(), n)) for n in (1, 2, 3)}
    assert starts[3] < starts[2], f"page 2 started before page 3, the longest on record: {starts}"
    recorded = sol_build.page_seconds(folder)
    assert set(recorded) == {"p1_side", "p2_side", "p3_side"} and recorded["p3_side"] != 9.0, recorded
    assert all(0 < seconds < 60 for seconds in recorded.values()), recorded
    assert "did not ask for" not in proc.stdout + proc.stderr


def test_pages_go_longest_first_by_the_first_guess_that_knows_them_all(tmp_path):
    """The last pass's seconds where they cover every page, else this build's warm-up's, else the gallery's order;
    a record that cannot be read is no record."""
    runs = [(f"k{n}", f"p{n}.py") for n in (1, 2, 3)]
    last, warm = {"p1": 1.0, "p2": 3.0}, {"p1": 2.0, "p2": 1.0, "p3": 3.0}
    assert [r[0] for r in sol_build.longest_first(runs, last | {"p3": 2.0}, warm)] == ["k2", "k3", "k1"]
    assert [r[0] for r in sol_build.longest_first(runs, last, warm)] == ["k3", "k1", "k2"]
    assert sol_build.longest_first(runs, last, {}) == runs
    (tmp_path / sol_build.PAGE_SECONDS).write_text("[1, 2")
    assert sol_build.page_seconds(tmp_path) == {}
    sol_build.record_page_seconds({"p1": 1.5}, tmp_path)
    sol_build.record_page_seconds({"p2": 2.5}, tmp_path)
    assert sol_build.page_seconds(tmp_path) == {"p1": 1.5, "p2": 2.5}
    (tmp_path / "a file").write_text("")
    sol_build.record_page_seconds({"p1": 1.0}, tmp_path / "a file")  # no folder to write in: said, not raised


def _on_the_gpu(log, seconds, name=None):  # a span "start end" in log, after the name where one is given
    start = time.time()
    time.sleep(seconds)
    with open(log, "a") as f:
        f.write(("" if name is None else f"{name} ") + f"{start} {time.time()}\n")


def _page_that_compiles(turn, log, timer):
    """A page's code block: a timer, a compile (inside a timer where told), a timer."""
    os.environ["SOL_GPU_TURN"] = turn

    def block():
        sol_build.gpu_turn(_on_the_gpu)(log, 0.3)
        compile_ = sol_build.while_compiling(lambda: time.sleep(1.0))
        sol_build.gpu_turn(compile_)() if timer else compile_()
        sol_build.gpu_turn(_on_the_gpu)(log, 0.3)

    sol_build.gpu_turn(block, timer=False)()
    return sol_build._turn["depth"]


def _side_by_side(tmp_path, page, *args):
    """Two processes running page(turn, log, *args); the seconds they took together, and the spans they logged."""
    turn, log = str(tmp_path / "turn"), str(tmp_path / "log")
    start = time.monotonic()
    children = [sol_build.start_child(page, turn, log, *args) for _ in range(2)]
    for pid, fd in children:
        with os.fdopen(fd, "rb") as pipe:
            data = pipe.read()
        assert sol_build.finish_child(data, os.waitpid(pid, 0)[1]) == 0
    spans = sorted(tuple(map(float, line.split())) for line in open(log).read().splitlines())
    return time.monotonic() - start, spans


def _two_pages(tmp_path, timer):
    seconds, spans = _side_by_side(tmp_path, _page_that_compiles, timer)
    assert len(spans) == 4 and all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), f"two timers at once: {spans}"
    return seconds


def test_a_page_lets_the_gpu_go_while_it_compiles(tmp_path):
    """Two pages of 0.6 s of timers and 1 s compiling each: one page's compile overlaps the other's timers
    (together about 2 s, not 3.2), and their timers never overlap."""
    assert _two_pages(tmp_path, timer=False) < 2.7


def test_a_compile_inside_a_timer_keeps_the_turn(tmp_path):
    assert _two_pages(tmp_path, timer=True) >= 3.2


def _page_of_blocks(turn, log):
    """A page's code block of 1 s on the GPU, no timer in it."""
    os.environ["SOL_GPU_TURN"] = turn
    sol_build.gpu_turn(_on_the_gpu, timer=False)(log, 1.0)
    return 0


def test_code_blocks_share_the_gpu(tmp_path):
    """Two pages' code blocks outside their timers run at once: together in about 1 s, not 2."""
    seconds, spans = _side_by_side(tmp_path, _page_of_blocks)
    assert len(spans) == 2 and spans[1][0] < spans[0][1], f"one block after the other: {spans}"
    assert seconds < 1.8


def _page_in_turn(turn, log, role):
    """One page of three, each writing its spans to log: 'block' runs a code block that times 0.3 s, then works on
    0.2 s (its block holding the shared turn again); 'first' asks to time 0.3 s at 0.1 s, while that timer runs;
    'second' at 0.45 s, while the first waits or runs."""
    os.environ["SOL_GPU_TURN"] = turn
    if role == "block":

        def block():
            sol_build.gpu_turn(_on_the_gpu)(log, 0.3, "its timer")
            _on_the_gpu(log, 0.2, "its work after")

        sol_build.gpu_turn(block, timer=False)()
    else:
        time.sleep(0.1 if role == "first" else 0.45)
        sol_build.gpu_turn(_on_the_gpu)(log, 0.3, role)
    return 0


def test_timers_asked_for_meanwhile_run_back_to_back_before_a_block_takes_the_turn_again(tmp_path):
    """A page's code block times, and two other pages ask to time while that timer runs or the next waits: the
    three timers run one after another, and the block's work after its timer waits for both others (a block does
    not take the turn back between timers that wait, so that they run back to back and blocks together after)."""
    turn, log = str(tmp_path / "turn"), str(tmp_path / "log")
    children = [sol_build.start_child(_page_in_turn, turn, log, role) for role in ("block", "first", "second")]
    for pid, fd in children:
        with os.fdopen(fd, "rb") as pipe:
            data = pipe.read()
        assert sol_build.finish_child(data, os.waitpid(pid, 0)[1]) == 0
    spans = {}
    for line in open(log).read().splitlines():
        *name, start, end = line.split()
        spans[" ".join(name)] = (float(start), float(end))
    timers = sorted(spans[name] for name in ("its timer", "first", "second"))
    assert all(a[1] <= b[0] for a, b in zip(timers, timers[1:])), f"two timers at once: {spans}"
    assert spans["its work after"][0] >= spans["second"][1], f"the block took the turn between timers: {spans}"


def _pages_side_by_side(page, tmp_path, roles, *args):
    """page(turn, log, role, *args) in a child process for each role, all at once on one turn: what each returned,
    and the spans they logged by name."""
    turn, log = str(tmp_path / "turn"), str(tmp_path / "log")
    children = [sol_build.start_child(page, turn, log, role, *args) for role in roles]
    returned = []
    for pid, fd in children:
        with os.fdopen(fd, "rb") as pipe:
            data = pipe.read()
        returned.append(sol_build.finish_child(data, os.waitpid(pid, 0)[1]))
    spans = collections.defaultdict(list)
    for line in open(log).read().splitlines():
        *name, start, end = line.split()
        spans[" ".join(name)].append((float(start), float(end)))
    return returned, spans


def _page_that_times_often(turn, log, role):
    """'often': a code block of 30 timers of 0.02 s, each right after the last (nothing between them), then 0.2 s of
    work; 'blocks': from 0.1 s on, 8 code blocks of 0.2 s of work each, a timer of 0.02 s after each but the last.
    Returns what the page kept the turn for: its timers that kept the lock alone for the next."""
    os.environ["SOL_GPU_TURN"] = turn
    if role == "often":

        def block():
            for _ in range(30):
                sol_build.gpu_turn(_on_the_gpu)(log, 0.02, "often timer")
            _on_the_gpu(log, 0.2, "often work after")

        sol_build.gpu_turn(block, timer=False)()
    else:
        time.sleep(0.1)
        for n in range(8):

            def block():
                _on_the_gpu(log, 0.2, "blocks work")
                if n < 7:
                    sol_build.gpu_turn(_on_the_gpu)(log, 0.02, "blocks timer")

            sol_build.gpu_turn(block, timer=False)()
    return sol_build._turn["kept"]


def test_a_page_that_times_again_at_once_keeps_the_turn(tmp_path, monkeypatch):
    """A page whose timers follow each other with nothing between keeps the lock alone from one to the next (for at
    most LINGER_CAP seconds in a row): beside a page whose blocks hold the shared turn 0.2 s at a time, its 30 timers
    take about 0.6 s, not a block's wait each (1.6 s or more: the other page's 8 blocks one after another). Nothing
    of another page runs beside a timer, the page's blocks let the lock go at their ends, and a page whose timers
    come 0.2 s apart keeps nothing."""
    kept, spans = _pages_side_by_side(_page_that_times_often, tmp_path, ("often", "blocks"))
    for timer in ("often timer", "blocks timer"):
        other = [s for name, ss in spans.items() if name.split()[0] != timer.split()[0] for s in ss]
        clashes = [(t, s) for t in spans[timer] for s in other if t[0] < s[1] and s[0] < t[1]]
        assert not clashes, f"another page ran beside a timer: {clashes}"
    often = spans["often timer"]
    assert len(often) == 30 and len(spans["blocks timer"]) == 7, dict(spans)
    assert often[-1][1] - often[0][0] < 1.2, f"30 timers of 0.02 s took {often[-1][1] - often[0][0]:.2f} s"
    assert kept[0] >= 20 and kept[1] == 0, kept


def _page_that_checks(turn, log, role):
    """'checks': one code block of 60 steps of 0.01 s of work, each ended by a sync (``Tensor.item``); 'timer': once
    that block has begun, 8 code blocks each holding a timer of 0.02 s."""
    import torch

    os.environ["SOL_GPU_TURN"] = turn
    if role == "checks":

        def block():
            for _ in range(60):
                _on_the_gpu(log, 0.01, "checks work")
                torch.zeros(1).item()

        sol_build.gpu_turn(block, timer=False)()
    else:
        for _ in range(1000):  # until the block has begun (its first step logged), at most 5 s
            if os.path.exists(log) and "checks work" in open(log).read():
                break
            time.sleep(0.005)
        for _ in range(8):
            sol_build.gpu_turn(lambda: sol_build.gpu_turn(_on_the_gpu)(log, 0.02, "timer"), timer=False)()


def test_a_timer_waits_for_another_pages_whole_block_and_never_runs_beside_it(tmp_path):
    """A block of many synced steps (a check) beside a page that times: the timers wait out the whole 0.6 s block,
    nothing of it running beside them."""
    _, spans = _pages_side_by_side(_page_that_checks, tmp_path, ("checks", "timer"))
    assert len(spans["timer"]) == 8 and len(spans["checks work"]) == 60, dict(spans)
    clashes = [(t, w) for t in spans["timer"] for w in spans["checks work"] if t[0] < w[1] and w[0] < t[1]]
    assert not clashes, f"the block ran beside a timer: {clashes}"
    assert spans["timer"][0][0] >= spans["checks work"][-1][1], "a timer started before the block ended"


def test_a_page_that_dies_beside_others_fails_alone(tmp_path):
    root = _gallery(tmp_path)
    (root / "die").write_text("")
    proc = _build(root, SOL_TIMED_JOBS="2")
    log = proc.stdout + proc.stderr
    assert "p1_first" in log and "died" in log and "SIGKILL" in log, log[-3000:]
    assert "second page ran clean" in (root / "gallery" / "p2_second.rst").read_text(), log[-3000:]


def _turn_depth():
    return sol_build._turn["depth"]


def _nested_turns():
    return sol_build.gpu_turn(sol_build.gpu_turn(_turn_depth))()


def test_a_timer_inside_a_timer_does_not_wait_for_itself(tmp_path, monkeypatch):
    """Inductor's autotuner and Triton's do_bench each take the turn; one calling the other takes it once."""
    monkeypatch.setenv("SOL_GPU_TURN", str(tmp_path / "turn"))
    assert sol_build.run_in_child(_nested_turns) == 2  # both held, the lock taken once (else: a deadlock)


def _blocks_modes(page, codes):  # each code block's hold on the GPU's turn as the page's process runs it
    import sphinx_gallery.gen_rst as gen_rst

    gen_rst.execute_code_block = lambda compiler, block, *rest, **kwargs: sol_build._turn["mode"]
    return sol_build._profiled(lambda fname: [gen_rst.execute_code_block(None, ("code", c, 1)) for c in codes], page)[0]


def test_a_block_that_times_a_wall_clock_holds_the_turn_alone_and_the_pages_other_blocks_share_it(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("SOL_GPU_TURN", str(tmp_path / "turn"))
    monkeypatch.delenv("SOL_WARMUP_RECORDS", raising=False)
    assert sol_build.ALONE, "no page holds the turn: the test has nothing to check"
    for stem, marker in sol_build.ALONE.items():
        codes = [f"results = {marker}", "errors = check()"]
        modes = sol_build.run_in_child(_blocks_modes, f"{stem}.py", codes)
        assert modes == [sol_build.EXCLUSIVE, sol_build.SHARED], (stem, modes)
        assert sol_build.run_in_child(_blocks_modes, "01_page.py", codes) == [sol_build.SHARED] * 2


def test_each_block_that_holds_the_turn_alone_is_in_its_page():
    """A page's wall-clock cell renamed would share the turn unseen: each marker is in its page's code."""
    for stem, marker in sol_build.ALONE.items():
        (page,) = (ROOT / "tutorials").rglob(f"{stem}.py")
        code = [line for line in page.read_text().splitlines() if not line.lstrip().startswith("#")]
        assert any(marker in line and "def " not in line for line in code), (stem, marker)


HELION_LIKE = """
import fcntl, os


def lock_is_free():  # asked through a descriptor of its own, as another process would
    fd = os.open(os.environ["SOL_GPU_TURN"], os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


class BoundKernel:
    def __init__(self):  # Helion traces a new shape here
        self.free_while_made = lock_is_free()

    def autotune(self, args):
        return lock_is_free()
"""


def _import_later(folder):
    sys.path.insert(0, folder)
    sys.meta_path.insert(0, sol_build.AfterImport("helion_like_kernel", sol_build._helion_takes_turns))
    import helion_like_kernel  # the page's import, after the hook

    def block():  # a page's code block: tracing a shape lets the turn go; the autotuner's search holds it
        bound = helion_like_kernel.BoundKernel()
        return bound.free_while_made, bound.autotune([]), helion_like_kernel.lock_is_free()

    return sol_build.gpu_turn(block, timer=False)()


def test_helion_lets_the_turn_go_while_it_traces_and_holds_it_while_it_searches(tmp_path, monkeypatch):
    """Helion's autotuner times configs with its own timer: a point with no stored config holds the GPU's turn for
    its whole search; tracing a new shape is CPU work, and lets it go. Helion is imported by the page, after the
    hook is in place."""
    (tmp_path / "helion_like_kernel.py").write_text(HELION_LIKE)
    (tmp_path / "turn").write_text("")
    monkeypatch.setenv("SOL_GPU_TURN", str(tmp_path / "turn"))
    assert sol_build.run_in_child(_import_later, str(tmp_path)) == (True, False, False)


def _worker_times_while_main_compiles(turn):
    """The main thread lets the turn go to compile; meanwhile a thread of the page times: the lock stays the
    process's until the thread is done, and the counts come back to nothing held."""
    import threading

    os.environ["SOL_GPU_TURN"] = turn
    sys.path.insert(0, str(os.path.dirname(turn)))
    from helion_like_kernel import lock_is_free

    seen = {}

    def timer():
        time.sleep(0.3)
        seen["free while the thread timed"] = lock_is_free()

    def compiling():
        thread = threading.Thread(target=sol_build.gpu_turn(timer))
        thread.start()
        time.sleep(0.1)
        thread.join()
        seen["free after"] = lock_is_free()

    sol_build.gpu_turn(lambda: sol_build.while_compiling(compiling)(), timer=False)()
    return seen, sol_build._turn["shared"] + sol_build._turn["exclusive"], sol_build._turn["depth"], lock_is_free()


def test_a_timer_on_another_thread_holds_the_turn_while_the_main_thread_compiles(tmp_path):
    (tmp_path / "helion_like_kernel.py").write_text(HELION_LIKE)
    (tmp_path / "turn").write_text("")
    seen, holders, depth, free = sol_build.run_in_child(_worker_times_while_main_compiles, str(tmp_path / "turn"))
    assert seen == {"free while the thread timed": False, "free after": True}, seen
    assert (holders, depth, free) == (0, 0, True)


def _lock_free(mode):
    """Whether another process could take the GPU's turn in ``mode`` now (fcntl.LOCK_SH: held shared or not at all
    here; fcntl.LOCK_EX: not held at all); its own descriptor's lock goes when the file closes."""
    import fcntl

    with open(os.environ["SOL_GPU_TURN"]) as other:
        try:
            fcntl.flock(other, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
    return True


def _shares_now():
    import fcntl

    return _lock_free(fcntl.LOCK_SH)


def _free_now():
    import fcntl

    return _lock_free(fcntl.LOCK_EX)


def _xla_compile_in_a_block():
    import types

    compiler = types.SimpleNamespace(backend_compile_and_load=_shares_now)  # XLA's compile, as jax._src.compiler has
    sol_build._xla_compiles_alone(compiler)

    def block():  # a JAX page's code block: work outside the compile, the compile, work after it
        return _shares_now(), compiler.backend_compile_and_load(), _shares_now()

    return sol_build._xla["wrapped"], sol_build.gpu_turn(block, timer=False)()


def test_xla_compiles_with_the_gpu_alone_and_jax_blocks_share_it(tmp_path, monkeypatch):
    """XLA times candidate kernels as it compiles a program: the compile holds the GPU's turn alone, the rest of a
    JAX page's block shares it."""
    (tmp_path / "turn").write_text("")
    monkeypatch.setenv("SOL_GPU_TURN", str(tmp_path / "turn"))
    assert sol_build.run_in_child(_xla_compile_in_a_block) == (True, (True, False, True))


def _jax_lowering_in_a_block():
    import types

    pxla = types.SimpleNamespace(lower_sharding_computation=_free_now)  # as jax._src.interpreters.pxla has it
    sol_build._jax_lowers_without_the_turn(pxla)
    return sol_build.gpu_turn(lambda: (pxla.lower_sharding_computation(), _free_now()), timer=False)()


def test_a_jax_program_lowers_with_the_turn_let_go(tmp_path, monkeypatch):
    """Lowering is CPU work: another page may time meanwhile; the block holds its share again after it."""
    (tmp_path / "turn").write_text("")
    monkeypatch.setenv("SOL_GPU_TURN", str(tmp_path / "turn"))
    assert sol_build.run_in_child(_jax_lowering_in_a_block) == (True, False)


def _first_block_shares(page):
    import sphinx_gallery.gen_rst as gen_rst

    os.environ.pop("SOL_WARMUP_RECORDS", None)
    sys.modules.pop("jax._src.compiler", None)  # as in a page's process: JAX not imported yet (this child only)
    sol_build._xla["wrapped"] = False
    gen_rst.execute_code_block = lambda compiler, block, *rest, **kwargs: _shares_now()

    def run(page):  # sphinx-gallery running the page: its first code block
        return gen_rst.execute_code_block(None, ("code", "", 1))

    return sol_build._profiled(run, page)[0]


def test_a_jax_page_holds_the_gpu_alone_until_xla_compiles_are_wrapped(tmp_path, monkeypatch):
    """A page that imports JAX runs its code blocks with the GPU's turn alone until JAX's compiler is wrapped (its
    first block imports JAX); another page's blocks share it."""
    (tmp_path / "turn").write_text("")
    monkeypatch.setenv("SOL_GPU_TURN", str(tmp_path / "turn"))
    (tmp_path / "05_page.py").write_text("import jax, jax.numpy as jnp\n")
    (tmp_path / "01_page.py").write_text("import torch\n")
    assert sol_build.run_in_child(_first_block_shares, str(tmp_path / "05_page.py")) is False
    assert sol_build.run_in_child(_first_block_shares, str(tmp_path / "01_page.py")) is True


def _interrupted_waits():
    """A wait for the turn interrupted (a signal's exception inside flock), for a timer and for a compile's retaking:
    no holder is left counted, the main thread's depth comes back, and the lock is free after."""
    settle, seen = sol_build._settle, []

    def interrupted():
        raise KeyboardInterrupt

    sol_build._settle = interrupted
    try:
        sol_build.gpu_turn(lambda: None)()
    except KeyboardInterrupt:
        seen.append((sol_build._turn["shared"], sol_build._turn["exclusive"]))
    sol_build._settle = settle

    def block():
        def compiling():
            sol_build._settle = interrupted  # the retaking after the compile is interrupted

        try:
            sol_build.while_compiling(compiling)()
        except KeyboardInterrupt:
            sol_build._settle = settle
            seen.append(sol_build._turn["depth"])

    sol_build.gpu_turn(block, timer=False)()
    return seen, sol_build._turn["shared"], sol_build._turn["exclusive"], _shares_now()


def test_an_interrupted_wait_for_the_turn_leaves_nothing_counted(tmp_path, monkeypatch):
    (tmp_path / "turn").write_text("")
    monkeypatch.setenv("SOL_GPU_TURN", str(tmp_path / "turn"))
    assert sol_build.run_in_child(_interrupted_waits) == ([(0, 0), 1], 0, 0, True)


class _FakeDriver:
    """CUDA's driver as ctypes would load it, for two GPUs: the first's primary context started by this process (its
    queued work done only when cuCtxSynchronize runs in it), the second's not."""

    def __init__(self):
        self.calls, self.current = [], None

    def __getattr__(self, name):
        import ctypes

        def call(*args):
            self.calls.append(name)
            if name == "cuDeviceGetCount":
                ctypes.cast(args[0], ctypes.POINTER(ctypes.c_int))[0] = 2
            elif name == "cuDeviceGet":
                ctypes.cast(args[0], ctypes.POINTER(ctypes.c_int))[0] = args[1]
            elif name == "cuDevicePrimaryCtxGetState":
                ctypes.cast(args[2], ctypes.POINTER(ctypes.c_int))[0] = int(args[0].value == 0)
            elif name == "cuDevicePrimaryCtxRetain":
                ctypes.cast(args[0], ctypes.POINTER(ctypes.c_void_p))[0] = 1000 + args[1].value
            elif name == "cuCtxPushCurrent_v2":
                self.current = args[0].value
            elif name == "cuCtxSynchronize":
                self.calls.append(f"synchronized {self.current}")
            return 0

        return call


def test_a_page_waits_for_the_gpu_work_of_every_context_it_started(monkeypatch):
    """JAX's work runs in the GPU's primary context, where torch's synchronize does not look unless torch started
    CUDA: the turn is let go only after cuCtxSynchronize in each primary context the process started, and none other
    is touched; without a driver there is nothing to wait for."""
    import ctypes

    driver = _FakeDriver()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: driver)
    sol_build._cuda_driver.cache_clear()  # the driver is loaded once a process: here, the stand-ins
    assert sol_build._primary_contexts_idle() == 1
    assert "synchronized 1000" in driver.calls and not any(c.startswith("synchronized 1001") for c in driver.calls)
    assert driver.calls.count("cuDevicePrimaryCtxRetain") == driver.calls.count("cuDevicePrimaryCtxRelease_v2") == 1
    assert sol_build._primary_contexts_reset() == 1 and driver.calls.count("cuDevicePrimaryCtxReset_v2") == 1

    def no_driver(name):
        raise OSError(name)

    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    sol_build._cuda_driver.cache_clear()
    assert sol_build._primary_contexts_idle() is None and sol_build._primary_contexts_reset() is None
    sol_build._cuda_driver.cache_clear()


def _leave_and_report(report, started):
    """A page's function that makes its process look as if it used the GPU (``started``) and, where it frees the GPU's
    memory at its end, writes whether the turn was held then, shared."""
    import fcntl

    def reset():
        probe = os.open(os.environ["SOL_GPU_TURN"], os.O_RDWR)  # another open file: its lock meets the child's
        try:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                alone = "free"
            except BlockingIOError:
                alone = "held"
            fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)  # raises where the child held it alone
            with open(report, "w") as out:
                out.write(f"{alone} shared")
        finally:
            os.close(probe)
        return 1

    sol_build._gpu_started = lambda: started
    sol_build._primary_contexts_reset = reset
    return "sent"


def test_a_page_frees_its_gpu_memory_with_the_turn_held_after_sending_its_value(tmp_path, monkeypatch):
    """A process that exits with GPU memory slows another's kernels as the driver frees it: a page's process, its value
    sent, frees it with the turn held shared (no timer beside it), and the turn goes with the process. A process that
    never started the GPU, or a build that takes no turns, has nothing to free there."""
    import fcntl

    turn, report = tmp_path / "turn", tmp_path / "report"
    turn.write_text("")
    monkeypatch.setenv("SOL_GPU_TURN", str(turn))
    assert sol_build.run_in_child(_leave_and_report, str(report), True) == "sent"
    assert report.read_text() == "held shared"
    fd = os.open(turn, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the child is gone: so is its turn
    finally:
        os.close(fd)
    report.unlink()
    assert sol_build.run_in_child(_leave_and_report, str(report), False) == "sent" and not report.exists()
    monkeypatch.delenv("SOL_GPU_TURN")
    assert sol_build.run_in_child(_leave_and_report, str(report), True) == "sent" and not report.exists()


def _big():
    return b"x" * (1 << 20)


def test_a_child_whose_pipe_is_gone_exits_without_unwinding_into_the_caller(tmp_path):
    """A child that cannot send its value (the parent stopped reading: a build cut short) leaves at once; it never
    returns into the parent's code (in a build, Sphinx's)."""
    parent, marker = os.getpid(), tmp_path / "unwound"
    pid, fd = sol_build.start_child(_big)
    if os.getpid() != parent:  # only a child that came back out of start_child runs this
        marker.write_text("")
        os._exit(0)
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    assert not marker.exists() and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1


def test_the_timed_pass_runs_pages_side_by_side_only_on_a_gpu_that_holds_them(monkeypatch):
    """On a 16-core machine: 6 pages at a time on an H200 (141 GiB), 5 on an H100 (80), 2 on a 40 GB A100, 1 on a
    24 GB RTX 4090 or where nvidia-smi cannot say; on 8 cores at most 4; SOL_TIMED_JOBS decides where set."""
    monkeypatch.delenv("SOL_TIMED_JOBS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert sol_build.timed_jobs(gpu=False) == 1
    assert [sol_build.timed_jobs(True, gib) for gib in (141, 80, 40, 24, 0)] == [6, 5, 2, 1, 1]
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert sol_build.timed_jobs(True, 141) == 4
    monkeypatch.setenv("SOL_TIMED_JOBS", "1")
    assert sol_build.timed_jobs(gpu=True, memory_gib=141) == 1
    monkeypatch.setenv("SOL_TIMED_JOBS", "3")
    assert sol_build.timed_jobs(gpu=False) == 3


# ---- the warm-up pass ----

TIMED = """
import pathlib, sys, timeit, triton.testing
calls = []
value = triton.testing.do_bench(lambda: calls.append(1), warmup=5, rep=20, return_mode="median")
assert calls == [1] and value > 0, (calls, value)  # what it times ran once; a number came back
times = timeit.repeat(lambda: calls.append(2), number=1, repeat=7)  # how 05 (JAX) times
assert calls == [1, 2] and len(times) == 7 and min(times) > 0, (calls, times)
pathlib.Path(__file__).with_suffix(".ran").write_text("ok")
"""


def test_warm_up_runs_each_page_once_untimed_and_reports_failures(tmp_path):
    good, bad = tmp_path / "01_good.py", tmp_path / "02_bad.py"
    good.write_text(TIMED)
    bad.write_text("raise SystemExit(3)\n")
    lines = []
    done = sol_build.warm_up([good, bad], jobs=2, log=lines.append)
    assert done["01_good"][1] == 0, done["01_good"][2]
    assert done["02_bad"][1] == 3
    assert good.with_suffix(".ran").read_text() == "ok"
    assert any("02_bad" in line and "exit 3" in line for line in lines), lines


def test_warm_up_autotunes_no_helion_kernel(tmp_path, monkeypatch):
    """Beside the other pages on the GPU a Helion search would time its configs under their load (and the timed pass
    would reuse its pick from Helion's cache): the warm-up's pages run with SOL_HELION_AUTOTUNE=0, whatever the
    build's own setting."""
    monkeypatch.delenv("SOL_HELION_AUTOTUNE", raising=False)
    page = tmp_path / "01_helion.py"
    page.write_text(
        "import os, pathlib\npathlib.Path(__file__).with_suffix('.env').write_text(os.environ['SOL_HELION_AUTOTUNE'])\n"
    )
    done = sol_build.warm_up([page], jobs=1, log=lambda line: None)
    assert done["01_helion"][1] == 0, done["01_helion"][2]
    assert page.with_suffix(".env").read_text() == "0"
    assert "SOL_HELION_AUTOTUNE" not in os.environ  # the build's own processes are left as they were


def test_the_warm_up_starts_the_longest_first_by_an_earlier_warm_ups_seconds(tmp_path):
    pages = [tmp_path / f"0{i}_page.py" for i in (1, 2, 3)]
    for page, size in zip(pages, (300, 200, 100)):  # the largest file first without seconds
        page.write_text(f"# {'x' * size}\n")
    lines = []
    sol_build.warm_up(pages, jobs=1, log=lines.append, seconds={"01_page": 1.0, "02_page": 9.0, "03_page": 5.0})
    assert [line.split()[1] for line in lines] == ["02_page", "03_page", "01_page"], lines
    lines.clear()
    sol_build.warm_up(pages, jobs=1, log=lines.append, seconds={"01_page": 1.0})  # one page not known: by size
    assert [line.split()[1] for line in lines] == ["01_page", "02_page", "03_page"], lines


def test_the_committed_warm_up_seconds_know_every_page():
    """A fresh machine's warm-up takes its order from docs/warm-up-seconds.json: a page it does not know sends the
    whole warm-up back to the largest files first."""
    seconds = sol_build.page_seconds(ROOT / "docs", sol_build.WARM_UP_SECONDS)
    stems = {page.stem for page in TUTORIALS}
    assert stems <= set(seconds), sorted(stems - set(seconds))
    assert all(value > 0 for value in seconds.values()), seconds


def test_a_page_that_failed_beside_the_others_warms_up_again_alone(tmp_path):
    """A page that ran out of GPU memory beside the others (a cold build on an H100: 04 beside 06 and 61) gets a
    second warm-up, alone; it is stamped if that one passes."""
    flaky, good = tmp_path / "01_flaky.py", tmp_path / "02_good.py"
    flaky.write_text(
        "import pathlib\nmark = pathlib.Path(__file__).with_suffix('.tried')\n"
        "if not mark.exists():\n    mark.write_text('')\n    raise SystemExit(4)\n"
    )
    good.write_text("pass\n")
    lines = []
    done = sol_build.warm_up([flaky, good], jobs=2, log=lines.append)
    assert done["01_flaky"][1] == 0 and done["02_good"][1] == 0, done
    assert any("exit 4" in line for line in lines) and any("again, one at a time" in line for line in lines), lines
    assert (
        sum("01_flaky compiled" in line for line in lines) == 2
        and sum("02_good compiled" in line for line in lines) == 1
    )


def test_only_pages_the_build_will_run_are_warmed(tmp_path):
    from sphinx_gallery.utils import get_md5sum

    src, out = tmp_path / "tutorials", tmp_path / "docs" / "tutorials"
    (src / "deep_dives").mkdir(parents=True)
    (out / "deep_dives").mkdir(parents=True)
    for name in ("01_a.py", "02_b.py", "deep_dives/11_c.py", "README.txt", "deep_dives/README.txt"):
        (src / name).write_text(f"print({name!r})\n")
    (out / "02_b.py.md5").write_text(get_md5sum(str(src / "02_b.py"), mode="t"))  # ran unchanged last time
    (out / "01_a.py.md5").write_text("an older source")
    conf = {"filename_pattern": re_sep() + r"\d\d_", "plot_gallery": True}
    assert [p.name for p in sol_build.pages_to_run(conf, src, out)] == ["01_a.py", "11_c.py"]
    assert sol_build.pages_to_run(dict(conf, plot_gallery=False), src, out) == []
    assert [p.name for p in sol_build.pages_to_run(dict(conf, filename_pattern=re_sep() + "11"), src, out)] == [
        "11_c.py"
    ]


def re_sep():
    import re

    return re.escape(os.sep)


# ---- the pages' timers ----


def _bench(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "bench"]
    assert len(found) == 1, f"{path.name}: no single top-level bench()"
    return found[0]


def _captures(node):
    """The `with torch.cuda.graph(...)` statements under node."""
    return [
        w
        for w in ast.walk(node)
        if isinstance(w, ast.With)
        and any(
            isinstance(item.context_expr, ast.Call) and ast.unparse(item.context_expr.func) == "torch.cuda.graph"
            for item in w.items
        )
    ]


@pytest.mark.parametrize(
    "path", [p for p in TUTORIALS if "torch.cuda.graph" in p.read_text(encoding="utf-8")], ids=lambda p: p.stem
)
def test_the_timer_runs_what_it_captures_eagerly_first(path):
    """A page's bench(fn) calls fn() at its top level before it captures fn in a CUDA graph: a kernel's first
    launch (compiling it, loading its module, a library's lazy set-up) never happens inside a capture. And the
    capture is thread-local: what another thread of the process does (a compile worker's, a runtime's) cannot
    invalidate it. A timer that captured first fails here."""
    bench = _bench(path)
    captures = _captures(bench)
    assert captures, f"{path.name}: bench() captures no CUDA graph"
    eager = [s for s in bench.body if isinstance(s, ast.Expr) and ast.unparse(s.value) == "fn()"]
    assert eager, f"{path.name}: bench() never runs fn() eagerly at its top level"
    first_capture = min(c.lineno for c in captures)
    assert eager[0].lineno < first_capture, f"{path.name}: bench() captures fn before it runs it eagerly"
    for capture in captures:
        (call,) = [i.context_expr for i in capture.items]
        modes = [k.value for k in call.keywords if k.arg == "capture_error_mode"]
        assert modes and isinstance(modes[0], ast.Constant) and modes[0].value == "thread_local", (
            f"{path.name}: line {capture.lineno} captures without capture_error_mode='thread_local'"
        )
    inside = {c.lineno for c in captures}
    graphs_elsewhere = [
        c.lineno for c in _captures(ast.parse(path.read_text(encoding="utf-8"))) if c.lineno not in inside
    ]
    assert not graphs_elsewhere, f"{path.name}: CUDA graphs captured outside bench() (lines {graphs_elsewhere})"


def test_the_guard_fails_a_timer_that_captures_first(tmp_path):
    """The check above on a timer written the wrong way round."""
    bad = tmp_path / "99_bad.py"
    bad.write_text(
        textwrap.dedent("""
        def bench(fn, graph=True):
            with torch.cuda.graph(g := torch.cuda.CUDAGraph(), capture_error_mode="thread_local"):
                fn()
            fn()
            return 1.0
    """)
    )
    with pytest.raises(AssertionError, match="captures fn before it runs it eagerly"):
        test_the_timer_runs_what_it_captures_eagerly_first(bad)


def test_a_warm_up_stamp_names_the_source_and_the_caches(tmp_path, monkeypatch):
    """A later build skips the warm-up of a page only for the same source compiled into the same caches."""
    page = tmp_path / "01_page.py"
    page.write_text("print(1)\n")
    stamp = lambda: sol_build.stamps([page])[page]
    first = stamp()
    assert first.startswith("01_page-") and stamp() == first
    page.write_text("print(2)\n")
    assert stamp() != first, "an edited page kept its stamp"
    second = stamp()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert stamp() != second, "another cache folder kept the stamp"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    assert sol_build._stamp_folder() == tmp_path / "triton" / "sol-warm-up", "stamps not beside Triton's cache"


def test_the_warm_ups_autotuning_picks_are_removed_and_earlier_ones_kept(tmp_path):
    """forget_autotuning removes the *.best_config files Inductor stored since the warm-up started (timed beside
    other pages on the GPU), wherever they are under the cache folder, and keeps the earlier ones (a timed pass's)."""
    import time

    since = time.time()
    old, new, other = tmp_path / "ab" / "k1.best_config", tmp_path / "cd" / "k2.best_config", tmp_path / "cd" / "k2.py"
    for path in (old, new, other):
        path.parent.mkdir(exist_ok=True)
        path.write_text("{}")
    os.utime(old, (since - 60, since - 60))
    os.utime(new, (since + 1, since + 1))
    assert sol_build.forget_autotuning(since, root=tmp_path) == 1
    assert old.exists() and other.exists() and not new.exists()
    assert sol_build.forget_autotuning(since, root=tmp_path / "none") == 0


READS_NO_PICK = """
from torch._inductor.runtime.autotune_cache import AutotuneCache

assert AutotuneCache.read_best(None, {}, []) is None, "the warm-up read a stored pick"
"""


def test_a_warm_up_reads_no_stored_autotuning_pick(tmp_path):
    """In a warm-up's process Inductor finds no stored pick: a kernel compiled there keeps all its launch configs in
    the compile cache, and the timed pass times them alone (a stored pick would have cut them to one)."""
    page = tmp_path / "01_reads.py"
    page.write_text(READS_NO_PICK)
    seconds, code, output = sol_build.warm_up([page], jobs=1, log=lambda line: None)["01_reads"]
    assert code == 0, output
