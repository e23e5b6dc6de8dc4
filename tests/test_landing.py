"""The landing page's summary of what the tutorials measured (docs/_ext/sol_results.py), and the contract
between a page that writes its results and the build that reads them.

Most tests run the reader and the build's two handlers on small made-up trees (fast); the last ones read the
site that the session's `built_site` fixture built once (tests/conftest.py).
"""

import html
import math
import os
import pathlib
import re
import sys
import types

import pandas as pd
import pytest

from conftest import ROOT, TUTORIALS

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import sol_results  # noqa: E402

COLUMNS = ["ours, % of light", "ours / best peer"]
WRITERS = [p for p in TUTORIALS if "SOL_RESULTS" in p.read_text(encoding="utf-8")]


def page_table():
    """A summary table as the pages make it: indexed by direction, dtype and N, a peer missing at one point."""
    index = pd.MultiIndex.from_tuples([("forward", "float32", n) for n in (256, 1024, 4096)]
                                      + [("backward", "float32", n) for n in (256, 1024, 4096)],
                                      names=["direction", "dtype", "N"])
    return pd.DataFrame({"ours, % of light": [50.0, 90.0, 70.0, 40.0, 60.0, float("nan")],
                         "ours / best peer": [0.8, 1.5, 1.1, float("nan"), 2.0, float("nan")],
                         "speed of light": 1000.0}, index=index)


def test_what_a_page_writes_the_build_reads(tmp_path):
    """The pages' block (two columns of their table, to_csv) gives one summary row per direction and dtype."""
    page_table()[COLUMNS].to_csv(tmp_path / "01_fused_softmax.csv")
    found = sol_results.read_results(tmp_path)
    assert list(found) == ["01_fused_softmax"]
    forward, backward = sol_results.summarize(found["01_fused_softmax"])
    assert forward["what"] == "forward, float32" and backward["what"] == "backward, float32", "rows out of the page's order"
    assert (forward["best"], forward["best at"], forward["lowest"], forward["lowest at"]) == (90.0, 1024, 50.0, 256)
    assert (forward["worst ratio"], forward["worst at"], forward["median ratio"], forward["peer points"]) == (0.8, 256, 1.1, 3)
    # a point where ours was not measured counts nowhere; a point with no peer counts only for % of light
    assert (backward["best"], backward["lowest"], backward["sizes"]) == (60.0, 40.0, [256, 1024, 4096])
    assert (backward["worst ratio"], backward["median ratio"], backward["peer points"]) == (2.0, 2.0, 1)


def test_results_without_key_columns_or_any_measurement(tmp_path):
    """No key column is allowed; a page whose kernel did not run (all empty) says so, not 0%."""
    pd.DataFrame({"N": [8192, 16384], COLUMNS[0]: [float("nan")] * 2, COLUMNS[1]: [float("nan")] * 2}) \
        .to_csv(tmp_path / "12_softmax_staged_gluon.csv", index=False)
    (row,) = sol_results.summarize(sol_results.read_results(tmp_path)["12_softmax_staged_gluon"])
    assert row["what"] == "all points" and math.isnan(row["best"]) and row["peer points"] == 0
    pages = {"12_softmax_staged_gluon": ("tutorials/deep_dives/12_softmax_staged_gluon", "Softmax, staged", True)}
    text = sol_results.landing_rst(sol_results.read_results(tmp_path), pages, "on a test GPU.")
    assert "not measured" in text and "nan" not in text.lower()


def test_a_file_that_breaks_the_contract_is_named(tmp_path):
    page_table()[["ours, % of light"]].to_csv(tmp_path / "04_rms_norm.csv")
    with pytest.raises(ValueError, match=r"04_rms_norm\.csv.*ours / best peer"):
        sol_results.read_results(tmp_path)


@pytest.mark.parametrize("path", WRITERS, ids=lambda p: p.stem)
def test_each_page_writes_under_its_own_name_only_when_asked(path):
    """The block names the page's own file, and runs only where the build set SOL_RESULTS."""
    text = path.read_text(encoding="utf-8")
    names = re.findall(r'os\.environ\["SOL_RESULTS"\], "([^"]+)"\)', text)
    assert names == [f"{path.stem}.csv"], f"{path.name} writes {names}, expected [{path.stem}.csv]"
    block = text[text.index('if os.environ.get("SOL_RESULTS"):'):]
    assert block.index("SOL_RESULTS") < block.index(".to_csv("), "the write is not under the SOL_RESULTS guard"
    assert text.count("SOL_RESULTS") == 2, f"{path.name} uses SOL_RESULTS outside its one block"


def test_the_pages_that_write_results():
    """Every page with peers writes its results; 13 has none to compare with."""
    wanted = {"01_fused_softmax", "02_layer_norm", "02_layer_norm_backward_locks", "03_parallel_reduction",
              "04_rms_norm", "05_jax_rms_norm", "11_softmax_long_rows", "12_softmax_staged_gluon",
              "21_layer_norm_wide_forward", "22_layer_norm_staged_gluon", "23_layer_norm_wide_backward",
              "31_reduction_rows_and_columns", "41_rms_norm_wide_backward", "42_rms_norm_staged_gluon"}
    assert wanted <= {p.stem for p in WRITERS}
    assert "13_launch_heuristics" not in {p.stem for p in WRITERS}


# ---- the build's handlers, on a made-up tree: a page, its generated .rst, and this build's results ----

def fake_build(tmp_path, plot=True):
    """(app, the page's generated .rst): a confdir with tutorials/01_demo.py, a srcdir docs/, an outdir."""
    (tmp_path / "tutorials").mkdir(exist_ok=True)
    (tmp_path / "tutorials" / "01_demo.py").write_text(
        '"""\nDemo: a page\n============\n\nIt measures."""\nimport os\nos.environ.get("SOL_RESULTS")\n')
    rst = tmp_path / "docs" / "tutorials" / "01_demo.rst"
    rst.parent.mkdir(parents=True, exist_ok=True)
    app = types.SimpleNamespace(outdir=str(tmp_path / "build" / "html"), srcdir=str(tmp_path / "docs"),
                                confdir=str(tmp_path),
                                config=types.SimpleNamespace(sphinx_gallery_conf={"plot_gallery": plot}))
    return app, rst


def run_build(app, rst, writes):
    """The build's order: the results folder is set up, sphinx-gallery runs the page (writes results, makes
    its .rst) or skips it, then the landing page's files are written. Returns the landing page's reST."""
    sol_results._ask_for_results(app)
    if writes:
        page_table()[COLUMNS].to_csv(os.path.join(os.environ["SOL_RESULTS"], "01_demo.csv"))
    if writes is not None:  # None: sphinx-gallery skipped the page (unchanged), leaving its .rst as it was
        rst.write_text("the page\n")
        kept = pathlib.Path(app.srcdir) / "_generated" / "results" / "01_demo.csv"
        if kept.exists():  # made after the kept results, as in a real build (seconds later, whatever the clock's grain)
            later = kept.stat().st_mtime_ns + 10**9
            os.utime(rst, ns=(later, later))
    sol_results._write_landing_results(app)
    return (pathlib.Path(app.srcdir) / "_generated" / sol_results.INCLUDE).read_text()


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("SOL_RESULTS", raising=False)


def test_build_shows_what_ran_keeps_what_was_not_rerun_and_drops_what_went_stale(tmp_path, clean_env):
    app, rst = fake_build(tmp_path)
    # 1. the page ran and wrote its results: a table row linking to it, and the figure
    text = run_build(app, rst, writes=True)
    assert ":doc:`01 Demo <tutorials/01_demo>`" in text and "forward, float32" in text
    assert f"/_generated/{sol_results.FIGURE}" in text and (tmp_path / "docs" / "_generated" / sol_results.FIGURE).exists()
    assert os.environ["SOL_RESULTS"] == str(tmp_path / "build" / "results")
    # 2. sphinx-gallery skipped the unchanged page: its page and these numbers are still one run's
    text = run_build(app, rst, writes=None)
    assert "forward, float32" in text and "Not rerun by this build" in text
    assert not (tmp_path / "build" / "results" / "01_demo.csv").exists(), "last build's results were not cleared"
    # 3. the page was made again without results: the old numbers no longer match it, and are gone
    text = run_build(app, rst, writes=False)
    assert text.startswith("No results were measured in this build"), text
    assert not (tmp_path / "docs" / "_generated" / "results" / "01_demo.csv").exists()


def test_a_build_that_runs_no_tutorial_shows_no_numbers(tmp_path, clean_env):
    """html-noplot: one line, never numbers, even where an earlier build left some; SOL_RESULTS unset."""
    app, rst = fake_build(tmp_path)
    run_build(app, rst, writes=True)
    app.config.sphinx_gallery_conf["plot_gallery"] = False
    text = run_build(app, rst, writes=None)
    assert text == ("No results were measured in this build: it did not run the tutorials (``make html-noplot``). "
                    "Each page's own tables hold its numbers, where a build ran it.\n")
    assert "SOL_RESULTS" not in os.environ


# ---- the site the session built ----

def landing_section(built_site):
    landing = html.unescape((built_site / "html" / "index.html").read_text(encoding="utf-8"))
    start = landing.index('id="what-this-build-measured"')
    return landing[start:landing.index('id="reading-path"')]


def test_landing_page_shows_the_table_and_figure_of_this_build(built_site):
    section = landing_section(built_site)
    assert "No results were measured" not in section, "the build ran the tutorials but shows no results"
    for path in WRITERS:
        where = path.relative_to(ROOT / "tutorials").with_suffix("").as_posix()
        assert f'href="tutorials/{where}.html' in section, f"no row links to {path.stem}"
    image = re.search(r'<img[^>]+src="(_images/landing_results[^"]*\.png)"', section)
    assert image, "no figure in the landing page's results"
    assert (built_site / "html" / image.group(1)).stat().st_size > 10_000
    assert re.search(r"<td><p>[\d.]+(e-\d+)?% \(N = [\d,]+\)</p></td>", section), "no % of light in the table"
    import torch

    if not torch.cuda.is_available():
        assert "NOT GPU timings" in section, "a CPU build's landing page must say its timings are not GPU timings"


def test_execution_times_page_says_what_its_memory_column_holds(built_site):
    import torch

    times = html.unescape((built_site / "html" / "sg_execution_times.html").read_text(encoding="utf-8"))
    assert "The memory column:" in times
    memory = [float(m) for m in re.findall(r"<td><p>\d\d:\d\d\.\d{3}</p></td>\s*<td><p>([\d.]+)</p></td>", times)]
    assert len(memory) >= len(TUTORIALS), f"the execution-times page lists {len(memory)} memory figures"
    if torch.cuda.is_available():
        assert all(m > 0 for m in memory), f"a tutorial shows no GPU memory: {memory}"
    else:
        assert "no GPU memory was measured" in times
