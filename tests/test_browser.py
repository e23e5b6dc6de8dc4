"""Open the built site in a real headless browser (Debian's chromium, driven by Playwright).

Each page must load with no console error and no failed request, every image must decode, and the
tutorial pages must show their tables. Without chromium or Playwright this skips with the reason,
except in CI (CI=true), where it must run.
"""

import functools
import http.server
import os
import shutil
import threading

import pytest

from conftest import ROOT, SHOWN_NOT_RUN, TUTORIALS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _need_browser():
    reason = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        reason = "Playwright is not installed (pip install playwright)"
    if CHROMIUM is None:
        reason = "no chromium on PATH (Debian: apt-get install chromium)"
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser test must run in CI: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def served(built_site):
    root = built_site / "html"

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    _need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield b
        b.close()


PAGES = ["index.html", "tutorials/index.html", "sg_execution_times.html"] + [
    f"tutorials/{p.relative_to(ROOT / 'tutorials').with_suffix('').as_posix()}.html" for p in TUTORIALS
]


@pytest.mark.parametrize("path", PAGES)
def test_page_loads_cleanly(browser, served, path, tmp_path):
    page = browser.new_page()
    problems = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} {r.failure}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    response = page.goto(f"{served}/{path}", wait_until="networkidle")
    assert response is not None and response.ok, f"{path}: {response and response.status}"
    broken = page.evaluate(
        "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
    )
    assert not broken, f"{path}: images that did not load: {broken}"
    stem = path.rsplit("/", 1)[-1].removesuffix(".html")
    if stem[:2].isdigit() and stem not in SHOWN_NOT_RUN:  # a tutorial page, core or deep dive, that the build ran
        assert page.locator(".rendered_html table").count() >= 2, f"{path}: fewer than two tables"
        if "it measures no speed" not in page.content():  # a CPU run that says so draws no speed plot
            assert page.locator("img.sphx-glr-single-img, img.sphx-glr-multi-img").count() >= 1, f"{path}: no plot"
        assert page.locator("math").count() >= 1, f"{path}: no math rendered"
        page.screenshot(path=str(tmp_path / "page.png"), full_page=False)
    assert not problems, f"{path}: " + "\n".join(problems)
    page.close()
