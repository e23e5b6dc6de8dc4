"""The site as a reader gets it: `make html` on this machine, then the built pages and notebooks.

The build is made once per session (the `built_site` fixture in conftest.py). Without a GPU it runs
every tutorial through Triton's interpreter, so it also checks that each tutorial runs end to end.
"""

import html
import re

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import TUTORIALS

STEMS = [p.stem for p in TUTORIALS]


def page(built_site, stem):
    path = built_site / "html" / "tutorials" / f"{stem}.html"
    assert path.exists(), f"{path} was not built"
    return path.read_text(encoding="utf-8")


def test_every_tutorial_has_a_page():
    assert STEMS, "no tutorials found in tutorials/"


@pytest.mark.parametrize("stem", STEMS)
def test_page_has_tables_plot_downloads_and_run_time(built_site, stem):
    text = page(built_site, stem)
    assert '<table class="dataframe' in text or "<table id=" in text, "no HTML table on the page"
    assert re.search(r'<img[^>]+src="[^"]*sphx_glr_' + stem + r'_\d+\.png"', text), "no plot image"
    for ext in ("py", "ipynb"):
        link = re.search(rf'href="\.\./(_downloads/[0-9a-f]+/{stem}\.{ext})"', text)
        assert link, f"no .{ext} download link"
        assert (built_site / "html" / link.group(1)).stat().st_size > 0, f"the .{ext} download is missing"
    match = re.search(r"Total running time of the script:\s*</strong>\s*\((\d+) minutes ([\d.]+) seconds\)", text)
    assert match, "no run time on the page"
    assert int(match.group(1)) * 60 + float(match.group(2)) > 0
    # missing points show as "-", not as raw NaN
    assert not re.search(r"<td[^>]*>\s*nan\s*</td>", text), "a table shows a raw 'nan'"
    # the environment card is the first output on the page
    first_output = text.index("rendered_html")
    assert ">device<" in text[first_output:first_output + 3000], "the page does not open with its environment card"
    for key in ("driver / CUDA", "torch", "Triton", "built"):
        assert f">{key}<" in text, f"environment card lacks {key!r}"


def test_cpu_build_says_timings_are_not_gpu_timings(built_site):
    import torch

    if torch.cuda.is_available():
        pytest.skip("built on a GPU")
    for stem in STEMS:
        text = html.unescape(page(built_site, stem))
        assert "not GPU timings" in text or "NOT GPU timings" in text, f"{stem} does not say so"


def test_index_lists_tutorials_with_thumbnails_and_run_times(built_site):
    index = (built_site / "html" / "tutorials" / "index.html").read_text(encoding="utf-8")
    for stem in STEMS:
        assert f'href="{stem}.html"' in index, f"{stem} missing from the gallery"
        assert f"sphx_glr_{stem}_thumb.png" in index, f"{stem} has no thumbnail"
    times = (built_site / "html" / "sg_execution_times.html").read_text(encoding="utf-8")
    for stem in STEMS:
        assert f"{stem}.py" in times, f"{stem} missing from the run-time page"


@pytest.mark.parametrize("stem", STEMS)
def test_notebook_validates_and_runs_on_its_own(built_site, stem, tmp_path):
    """The downloadable notebook runs top to bottom in a fresh Jupyter kernel, outside the repo."""
    downloads = sorted((built_site / "html" / "_downloads").glob(f"*/{stem}.ipynb"))
    assert downloads, f"no downloadable {stem}.ipynb in the built site"
    nb_path = downloads[0]
    nb = nbformat.read(nb_path, as_version=4)
    nbformat.validate(nb)
    client = NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "the notebook produced no output"
