"""How the site's build runs its pages: each in a process of its own, after a pass that compiles them all.

**Isolation.** sphinx-gallery runs every page in the Sphinx process, one after another, so a page that leaves
the GPU in a broken state (a CUDA graph capture that failed, say: torch's random-number state then stays in
capture mode) breaks every page after it, and a library one page starts (JAX's runtime, with threads of its
own) runs on under the pages that follow. Here each page that runs is executed by sphinx-gallery's own
``generate_file_rst`` in a forked child of the Sphinx process, which hands back what sphinx-gallery needs
(its return value: title, time, memory, pass or failure) through a pipe and exits. The files it writes (the
page's ``.rst``, images, notebook) are on disk for the parent. A child that dies (a crash, a signal) makes its
page fail with that reason, rendered unrun; the pages after it start clean. For a fork to be safe the Sphinx
process itself must not start CUDA: ``conf.py`` asks NVML, not CUDA, whether there is a GPU
(``PYTORCH_NVML_BASED_CUDA_CHECK=1``), and nothing here touches the GPU. What most pages import (Triton,
pandas, matplotlib, torch's compiler, Liger-Kernel, quack's CuTe DSL: ``PREIMPORT``) is imported once before
the first fork, so that no page pays for it again; a forked child then checks that CUDA still starts
(``SOL_PREIMPORT=0`` skips this).

**Compile first, then time.** On a GPU most of a cold build is compiling: Triton's kernels, Inductor's for the
``torch.compile`` columns, XLA's for tutorial 05, quack's CuTe-DSL kernels. Before sphinx-gallery runs the
pages, ``_warm_up`` runs every page that the build will execute, at most one per CPU core at a time, each in a
fork of the Sphinx process (after the pre-import), the longest first (by an earlier warm-up's seconds: beside the
caches, else ``docs/warm-up-seconds.json``), with ``triton.testing.do_bench`` and ``timeit.repeat`` each replaced by
a single call: the pages' kernels compile into the on-disk caches (Triton's, Inductor's, JAX's, quack's), in
parallel on the CPU cores, and nothing is timed. Then the timed pass runs the pages, ``SOL_TIMED_JOBS`` at a time
(up to 6 on a GPU; 1: one after another), and a timer has the GPU alone (``gpu_turn``, a file lock): a timer takes it
alone, a code block shares it with other pages' blocks, so that nothing another page runs (its checks, first calls,
graph captures) shares the GPU with a timer; a page lets it go while Dynamo traces, Helion generates code or JAX
lowers a program on the CPU (``while_compiling``; never inside a timer or an autotuner's search), and a page's
process frees its GPU memory holding it before it exits (the driver's teardown slows a kernel beside it). The pages find
what they compile in the caches (Inductor then starts no pool of compile workers beside them). Both passes use the
Triton cache folder conf.py names: where none is named, Inductor and Helion each name one of their own as they build
a kernel, and a page's later kernels then go where the other pass does not look.
Inductor's autotuner picks torch.compile's launch configs by timing them, and stores its pick: the warm-up reads no
stored pick (a kernel it compiles keeps all its configs in the compile cache) and its own picks, timed beside other
pages, are removed after it, so that the timed pass times the candidates alone (``forget_autotuning``).
A page whose warm-up succeeded leaves a stamp beside Triton's cache (its source, the compiling packages'
versions, the cache folders): a later build of the same source skips its warm-up. A page whose warm-up fails
(out of GPU memory beside the others, say) is only logged: the timed pass compiles what it missed.
Helion's kernels compile there at their stored configs; a point with none is autotuned by the timed pass, its
search holding the GPU's turn (``SOL_HELION_AUTOTUNE=0`` in the warm-up's processes). ``SOL_WARMUP=0`` skips the pass;
``SOL_WARMUP_JOBS`` caps how many pages warm up at once. Without a GPU (Triton's interpreter compiles nothing)
there is no warm-up.

The log gives each phase's time (lines starting ``phase``): the warm-up (and each page's), the pre-import, each
page of the timed pass and the pass's total, and the whole build. Each page's line also says where its time went:
the seconds inside its timers (``do_bench``, ``timeit.repeat``), its slowest cells by first line, and the Triton
kernels it compiled rather than found in the cache, by name. A warm-up line quotes what a page said it could not
measure there: a call that failed in the warm-up compiles in the timed pass.
"""

import copy
import functools
import gc
import importlib.metadata
import json
import os
import pathlib
import pickle
import re
import select
import signal
import subprocess
import sys
import threading
import time

from sphinx.util import logging

_logger = logging.getLogger(__name__)
_started = time.monotonic()
_pages_time = [0.0, 0, None]  # seconds the timed pass spent in page processes, pages run, its Ahead
_warm_seconds = {}  # page stem: seconds its warm-up took in this build


def kernel_key(src, options=None):
    """How a Triton compile is named in the build's log and in a warm-up's record: the kernel; the hash of what
    ``triton.compiler.compile`` compiles (the function and what it calls, its arguments' types and specialization,
    its constants) and of its options (warps, stages); and the cache folder it is looked up in (where none is set,
    Inductor and Helion each point Triton at a folder of their own as they build a kernel). The warm-up's script
    carries this function's text."""
    import hashlib
    import os

    fn = getattr(src, "fn", None)
    name = getattr(fn, "__name__", None) or getattr(src, "name", None) or str(src).rsplit("/", 1)[-1]
    try:
        digest = src.hash()[:16]
    except Exception:  # no hash to read
        digest = "?"
    items = sorted(options.items()) if isinstance(options, dict) else options
    digest += "-" + hashlib.sha256(repr(items).encode()).hexdigest()[:8]
    return f"{name} {digest} {os.environ.get('TRITON_CACHE_DIR', '~/.triton/cache')}"


def _options(args, kwargs):
    """The options a call of ``triton.compiler.compile(src, target=None, options=None)`` passed, after src."""
    return kwargs.get("options", args[1] if len(args) > 1 else None)


def _once(fn, *args, **kwargs):  # a warm-up's do_bench: compiles and runs what the page would time; times nothing
    fn()
    return 1.0


def _repeat_once(stmt, *args, repeat=5, **kwargs):  # the same for a page that times with timeit (05's JAX)
    stmt()
    return [1.0] * repeat


# What a warm-up's page sees of its process (besides what the build's own process has): no results written, and no
# Helion search (``warm_up``); the one setting Inductor reads at import (its compile workers) the build's process sets
# before it imports Inductor (``_preimport``).
WARM_UP_ENV = {"MPLBACKEND": "Agg", "SOL_WARMUP": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1", "SOL_HELION_AUTOTUNE": "0"}


def _warm_up_page(page, record=None):
    """What a warm-up's process runs: the page as a script (its folder the working one), do_bench and timeit.repeat
    each replaced by one call of what they time, Inductor reading no stored autotuning pick (a kernel compiled here
    keeps all its launch configs in the compile cache, for the timed pass to time alone; the picks this pass stores are
    removed after it: ``forget_autotuning``); with ``record`` (a file), each Triton compile written there, a
    ``kernel_key`` a line. Meant for a process of its own: what it sets and patches stays so."""
    import runpy
    import timeit

    os.environ.update(WARM_UP_ENV)
    os.environ.pop("SOL_RESULTS", None)  # a warm-up's numbers are not results
    if "matplotlib" in sys.modules:  # imported before the fork: the backend it chose then
        sys.modules["matplotlib"].use("Agg")
    page = pathlib.Path(page)
    os.chdir(page.parent)
    sys.argv, sys.path[:0] = [str(page)], [str(page.parent)]
    try:
        import triton.testing

        triton.testing.do_bench = _once
    except ImportError:  # no Triton: nothing timed with it
        pass
    timeit.repeat = _repeat_once
    try:
        from torch._inductor.runtime.autotune_cache import AutotuneCache

        AutotuneCache.read_best = lambda self, *args, **kwargs: None
    except Exception:  # no Inductor here, or another one: its picks are still removed after the pass
        pass
    if record:
        import triton.compiler  # a kernel's launcher imports compile from here at its first call

        compile_ = triton.compiler.compile

        def compile_recorded(src, *args, **kwargs):
            with open(record, "a") as lines:
                lines.write(kernel_key(src, _options(args, kwargs)) + "\n")
            return compile_(src, *args, **kwargs)

        triton.compiler.compile = triton.compile = compile_recorded  # Inductor calls the second
    runpy.run_path(str(page), run_name="__main__")


def _exit_code(exit_):
    """The exit code a SystemExit gives a process (what Python gives ``sys.exit(code)``)."""
    if exit_.code is None or isinstance(exit_.code, int):
        return exit_.code or 0
    print(exit_.code, file=sys.stderr)
    return 1


def start_warm_up(page, record=None, close=()):
    """Fork a warm-up process for ``page`` (``_warm_up_page``): a fork of this one, so that what it imported (the
    pre-import) is not imported again by every page; its output (stdout and stderr) goes up a pipe. ``close``: file
    descriptors of the parent's that the child closes (other warm-ups' pipes). Returns (pid, the pipe's end to read,
    non-blocking)."""
    import traceback

    pid, fd = _fork_with_pipe(close)  # the parent's end to read, or the child's to write
    if pid:
        os.set_blocking(fd, False)
        return pid, fd
    code = 1  # the child: whatever fails here must never unwind into the parent's Sphinx
    try:
        os.dup2(fd, 1), os.dup2(fd, 2), os.close(fd)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # the page's prints, line by line, up the pipe
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        try:
            _warm_up_page(page, record)
            code = 0
        except SystemExit as exit_:
            code = _exit_code(exit_)
        except BaseException:
            traceback.print_exc()
    finally:
        try:
            sys.stdout.flush(), sys.stderr.flush()
        finally:
            os._exit(code)


def _drain(fd, chunks):
    """Read what is in a non-blocking pipe now into chunks; False once its writers have all closed it."""
    try:
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return False
    except BlockingIOError:
        return True


def _gpu():
    """Whether this machine has a CUDA GPU, asked without starting CUDA in this process (NVML)."""
    try:
        import torch
    except ImportError:
        return False
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    return torch.cuda.is_available()


def will_run(src, copy, gallery_conf):
    """Whether this build executes the gallery script src: sphinx-gallery's pattern selects it and its source
    differs from the one it last ran (``copy``, the page's copy of the script, holds that one's md5)."""
    from sphinx_gallery.gen_rst import executable_script
    from sphinx_gallery.utils import get_md5sum

    md5 = pathlib.Path(f"{copy}.md5")
    return executable_script(str(src), gallery_conf) and not (
        md5.exists() and md5.read_text() == get_md5sum(str(src), mode="t")
    )


# Pages that need a newer JAX than some supported Pythons can install (51, 52: Mosaic GPU's interpreter needs JAX
# 0.11.1, which needs Python 3.12; the CPU machines' Python 3.11 gets 0.10.2). Where this JAX is older, conf.py shows
# such a page without running it, and the tests of what a page's run makes skip it.
JAX_NEEDED = {"51_rms_norm_mosaic_gpu": (0, 11, 1), "52_rms_norm_mosaic_gpu_backward": (0, 11, 1)}


def jax_version():
    """The installed JAX's (major, minor, patch); (0, 0, 0) without one."""
    try:
        return tuple(int(p) for p in re.findall(r"\d+", importlib.metadata.version("jax"))[:3])
    except importlib.metadata.PackageNotFoundError:
        return (0, 0, 0)


def shown_not_run():
    """The stems of the pages this JAX cannot run (JAX_NEEDED)."""
    return {stem for stem, needed in JAX_NEEDED.items() if jax_version() < needed}


def pages_to_run(gallery_conf, tutorials, generated):
    """The gallery scripts (paths) under tutorials/ this build will execute, in the order sphinx-gallery asks for them:
    the top folder's, then each subsection's (a folder with a README), each folder's by file name."""
    tutorials, generated, readme = pathlib.Path(tutorials), pathlib.Path(generated), ("README.txt", "README.rst")
    subsections = sorted(d.name for d in tutorials.iterdir() if any((d / name).is_file() for name in readme))
    return [
        page
        for folder in [tutorials] + [tutorials / d for d in subsections]
        for page in sorted(folder.glob("*.py"))
        if will_run(page, generated / page.relative_to(tutorials), gallery_conf)
    ]


def gallery_runs(gallery_conf):
    """(key, fname, target_dir, src_dir, gallery_conf) of each page the build will run (``pages_to_run`` of each
    gallery), its folders named as sphinx-gallery names them (key: ``str(Path(src_dir, fname))``), so that a page
    started ahead in another folder is the page it later asks for."""
    src_root, runs = pathlib.Path(gallery_conf["src_dir"]), []
    examples, galleries = gallery_conf["examples_dirs"], gallery_conf["gallery_dirs"]
    for examples_dir, gallery_dir in zip(*([d] if isinstance(d, str) else d for d in (examples, galleries))):
        tutorials, generated = src_root / examples_dir, src_root / gallery_dir
        for page in pages_to_run(gallery_conf, tutorials, generated):
            target_dir = generated / page.parent.relative_to(tutorials)
            runs.append((str(page), page.name, target_dir, page.parent, gallery_conf))
    return runs


def unmeasured(output, most=5):
    """The lines of a page's output that say a call was not measured (a peer's error, printed by the page), cut to
    160 characters, at most ``most`` of them."""
    said = [line.strip() for line in output.splitlines() if re.search(r"not measured", line, re.I)]
    lines = [line[:160] for line in said if "SOL_HELION_AUTOTUNE=0" not in line]  # as in the timed pass: no search
    return lines[:most]


def warm_up(pages, jobs, log=print, record=None, seconds=None):
    """Run each page once with do_bench as a single call (``start_warm_up``: a fork of this process each), ``jobs`` at
    a time, the longest first (by ``seconds``, {page stem: seconds of an earlier warm-up}, where it knows every page;
    else the largest files first), then each page that failed once more, alone; with ``record`` (a folder), each page's
    Triton compiles are written to ``record/<page>.compiled``, a ``kernel_key`` a line. Returns {page name: (seconds,
    exit code, last lines of output)}; each page's line in the log gives its span in the pass."""
    # a page per core: Inductor compiles in the page's process. Helion is not autotuned here, beside the other pages
    # on the GPU: its search would time configs under their load, and the timed pass would reuse its pick (Helion
    # keeps it on disk); where no config is stored for a point, the timed pass autotunes it, holding the GPU's turn
    if seconds and all(page.stem in seconds for page in pages):
        queue = sorted(pages, key=lambda p: -seconds[p.stem])
    else:
        queue = sorted(pages, key=lambda p: -p.stat().st_size)
    running, done, first = {}, {}, time.monotonic()
    while queue or running:
        while queue and len(running) < jobs:
            page = queue.pop(0)
            compiled = None if record is None else pathlib.Path(record) / f"{page.stem}.compiled"
            if compiled:
                compiled.write_text("")  # this run's compiles only
            pid, fd = start_warm_up(page, compiled, close=[fd for _, fd, _, _ in running.values()])
            running[page] = (pid, fd, time.monotonic(), [])
        ready, _, _ = select.select([fd for _, fd, _, _ in running.values()], [], [], 0.2)
        for page, (pid, fd, start, chunks) in list(running.items()):
            if fd in ready:
                _drain(fd, chunks)
            exited, status = os.waitpid(pid, os.WNOHANG)
            if not exited:
                continue
            _drain(fd, chunks)
            os.close(fd)
            del running[page]
            output, end = b"".join(chunks).decode(errors="replace"), time.monotonic()
            code = os.waitstatus_to_exitcode(status)
            done[page.stem] = (end - start, code, output[-1500:])
            log(
                f"warm-up: {page.stem} compiled in {end - start:.0f} s (+{start - first:.0f} s to +{end - first:.0f} s)"
                + ("" if code == 0 else f" (exit {code}; the timed pass compiles what it missed)")
            )
            for line in unmeasured(output):  # a call that failed here compiles in the timed pass instead
                log(f"warm-up: {page.stem} said: {line}")
    failed = [page for page in pages if done[page.stem][1] != 0]
    if failed and jobs > 1:  # it may have failed for the others' sake (out of GPU memory beside them): once more, alone
        log(f"warm-up: {len(failed)} failed beside the others; again, one at a time")
        done.update(warm_up(failed, 1, log, record))
    return done


def _stamp_folder():
    """Where the warm-up notes which page sources it compiled: beside Triton's cache, so that emptying that cache
    empties the notes too."""
    triton_cache = os.environ.get("TRITON_CACHE_DIR") or str(pathlib.Path.home() / ".triton" / "cache")
    return pathlib.Path(triton_cache) / "sol-warm-up"


def stamps(pages):
    """{page: a name for what a warm-up of it compiled}: its source, the packages that compile, the caches."""
    import hashlib
    from importlib import metadata

    versions = []
    for package in ("torch", "triton", "jax", "jaxlib", "liger-kernel", "quack-kernels", "nvidia-cutlass-dsl"):
        try:
            versions.append(f"{package}=={metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} absent")
    caches = [
        os.environ.get(v, "")
        for v in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR", "QUACK_CACHE_DIR")
    ]
    setting = repr((versions, caches)).encode()
    return {
        page: f"{pathlib.Path(page).stem}-{hashlib.sha256(pathlib.Path(page).read_bytes() + setting).hexdigest()[:20]}"
        for page in pages
    }


def _warm_up(app):
    """builder-inited, before sphinx-gallery runs the pages: the warm-up pass, on a GPU. Pages whose source a
    warm-up already compiled with these packages into these caches (a stamp says so) are not run again."""
    conf = app.config.sphinx_gallery_conf
    if not conf.get("plot_gallery") or os.environ.get("SOL_WARMUP", "1") == "0" or not _gpu():
        return
    tutorials = pathlib.Path(app.confdir) / "tutorials"
    pages = pages_to_run(conf, tutorials, pathlib.Path(app.srcdir) / "tutorials")
    folder, names = _stamp_folder(), stamps(pages)
    cold = [page for page in pages if not (folder / names[page]).exists()]
    for page in set(pages) - set(cold):  # an earlier warm-up's record may be of another source: none read
        (folder / f"{page.stem}.compiled").unlink(missing_ok=True)
    os.environ["SOL_WARMUP_RECORDS"] = str(folder)  # where the timed pages find what their warm-up compiled
    if pages:  # the caches will hold what the pages compile: no pool of compile workers beside a page, in either pass
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    if cold:
        _preimport_once(gpu=True)  # before the warm-up's forks: they start with it
        start = time.monotonic()
        jobs = max(1, min(len(cold), int(os.environ.get("SOL_WARMUP_JOBS", 0)) or os.cpu_count() or 1))
        _logger.info(
            f"warm-up: compiling {len(cold)} pages, {jobs} at a time (nothing is timed)"
            + (f"; {len(pages) - len(cold)} compiled by an earlier build" if len(cold) < len(pages) else "")
        )
        folder.mkdir(parents=True, exist_ok=True)
        since = int(time.time())  # whole seconds: some file systems keep no finer times
        guesses = (page_seconds(folder, WARM_UP_SECONDS), page_seconds(pathlib.Path(app.srcdir), WARM_UP_SECONDS))
        hint = next((g for g in guesses if g and all(page.stem in g for page in cold)), None)
        done = warm_up(cold, jobs, log=_logger.info, record=folder, seconds=hint)
        _warm_seconds.update((stem, seconds) for stem, (seconds, _, _) in done.items())
        record_page_seconds(dict(_warm_seconds), folder, WARM_UP_SECONDS)  # the next cold warm-up's order
        if removed := forget_autotuning(since):
            _logger.info(f"warm-up: {removed} of Inductor's autotuning picks, timed beside other pages, removed")
        for page in cold:
            if done[page.stem][1] == 0:
                (folder / names[page]).write_text("")
            else:
                _logger.info(f"warm-up of {page.stem} failed; its last output:\n{done[page.stem][2]}")
        failed = [page.stem for page in cold if done[page.stem][1]]
        _logger.info(
            f"phase warm-up: {time.monotonic() - start:.0f} s for {len(cold)} pages"
            + (" (the longest first, by an earlier warm-up's seconds)" if hint else " (the largest files first)")
            + (f" ({len(failed)} failed: {', '.join(failed)})" if failed else "")
        )
    elif pages:
        _logger.info(
            f"phase warm-up: 0 s, the {len(pages)} pages were compiled by an earlier build (stamps in {folder})"
        )


def forget_autotuning(since, root=None):
    """Remove the launch configs Inductor's autotuner stored (``*.best_config`` files, beside its kernels under its
    cache folder, or ``root``) at or after ``since`` (a ``time.time()``): those the warm-up stored were timed beside
    the other pages on the GPU, so the timed pass times torch.compile's candidates again, alone, and stores its pick
    for later builds. Returns how many it removed."""
    if root is None:
        try:
            from torch._inductor.runtime.cache_dir_utils import default_cache_dir
        except ImportError:  # no Inductor here: nothing it stored
            return 0
        root = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir()
    removed = 0
    for path in pathlib.Path(root).rglob("*.best_config"):
        try:
            if path.stat().st_mtime >= since:
                path.unlink()
                removed += 1
        except FileNotFoundError:  # removed meanwhile
            pass
    return removed


def _fork_with_pipe(close=()):
    """Fork this process, with a pipe from the child to the parent: (pid, the pipe's end to read) in the parent, (0,
    the end to write) in the child, which first closes ``close`` (file descriptors of the parent's: other children's
    pipes)."""
    read, write = os.pipe()
    sys.stdout.flush(), sys.stderr.flush()
    gc.freeze()  # what the child inherits (torch, Triton, ...) is never scanned by its collections: 0.4 s a gc.collect
    pid = os.fork()
    if pid:
        gc.unfreeze()  # the parent's own collections go on as before
        os.close(write)
        return pid, read
    try:
        for fd in (read, *close):
            try:
                os.close(fd)
            except OSError:
                pass
    except BaseException:  # the child must never unwind into the parent's Sphinx
        os._exit(1)
    return 0, write


def start_child(function, *args, close=()):
    """Start function(*args) in a forked child, which sends its value (or its exception) through a pipe and exits
    (where it started the GPU and pages take turns on it, after freeing its GPU memory in the turn);
    ``close``: file descriptors of the parent's that the child closes first (other children's pipes). Returns
    (pid, the pipe's end to read); ``finish_child`` reads it."""
    pid, fd = _fork_with_pipe(close)  # the parent's end to read, or the child's to write
    if pid:
        return pid, fd
    code = 1  # the child: run, send the value (or the exception), leave without Sphinx's exit handlers, whatever
    try:  # fails here (a closed pipe, an interrupt): it must never unwind into the parent's Sphinx
        try:
            try:
                value = ("value", function(*args))
            except BaseException as err:  # the parent raises it
                value = ("error", err)
            data, sent = pickle.dumps(value), 0
        except BaseException as err:  # unpicklable: say so
            data, sent = pickle.dumps(("error", RuntimeError(f"{function.__name__}: {type(err).__name__}: {err}"))), 1
        with os.fdopen(fd, "wb") as pipe:
            pipe.write(data)
        sys.stdout.flush(), sys.stderr.flush()
        code = sent  # 0: the value sent
    finally:
        try:
            _leave_the_gpu_in_turn()
        finally:
            os._exit(code)


def finish_child(data, status):
    """The value a child sent (``data``, all it wrote; ``status``, from ``os.waitpid``), or its exception raised.
    Raises ChildProcessError if the child died without sending one (a crash, a signal)."""
    if not data:
        how = (
            f"signal {signal.Signals(os.WTERMSIG(status)).name}"
            if os.WIFSIGNALED(status)
            else f"exit code {os.WEXITSTATUS(status)}"
        )
        raise ChildProcessError(f"the page's process died ({how}) before it could report")
    try:
        kind, value = pickle.loads(data)
    except Exception as err:  # cut short (killed as it wrote), or a value this process cannot rebuild
        raise ChildProcessError(f"the page's process sent what cannot be read ({type(err).__name__}: {err})") from err
    if kind == "error":
        raise value
    return value


def run_in_child(function, *args):
    """function(*args) in a forked child; its value comes back through a pipe. Raises ChildProcessError if the
    child dies without one (a crash, a signal)."""
    pid, read = start_child(function, *args)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    return finish_child(data, status)


# Beside the warm-up's stamps: each page's seconds in the last timed pass, and in the last warm-up. A fresh machine
# has neither: docs/ holds the warm-up's from a build on an H200 (a guess at the order, not a figure shown anywhere)
PAGE_SECONDS, WARM_UP_SECONDS = "page-seconds.json", "warm-up-seconds.json"


def page_seconds(folder=None, name=PAGE_SECONDS):
    """{page stem: seconds} of the last pass that recorded them (``record_page_seconds``) in ``folder/name``; {} where
    none did."""
    path = pathlib.Path(folder or _stamp_folder()) / name
    try:
        seconds = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in seconds.items()} if isinstance(seconds, dict) else {}


def record_page_seconds(seconds, folder=None, name=PAGE_SECONDS):
    """Adds ``seconds`` ({page stem: seconds}) to the record ``page_seconds`` reads; where it cannot be written, the
    next pass keeps the order it would take without it (a hint, not a reason to fail a build)."""
    folder = pathlib.Path(folder or _stamp_folder())
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(page_seconds(folder, name) | seconds, indent=1, sort_keys=True))
    except OSError as err:
        _logger.info(f"the pages' seconds not recorded ({err})")


def longest_first(runs, *guesses):
    """``runs`` ((key, fname, ...) tuples, the gallery's order) reordered to start the longest pages first: by the
    first of ``guesses`` ({page stem: seconds}) that knows every page, in the gallery's order where none does. A page
    started late that runs long is the pass's tail, run with few pages beside it."""
    stems = [pathlib.Path(run[1]).stem for run in runs]
    for seconds in guesses:
        if seconds and all(stem in seconds for stem in stems):
            return [run for _, run in sorted(zip(stems, runs), key=lambda pair: -seconds[pair[0]])]
    return list(runs)


class Ahead:
    """The timed pass's page processes, up to ``jobs`` at once: the page sphinx-gallery asks for, and the pages it
    will ask for next, started ahead of it. Each runs ``function(page, *args)`` in a forked child (``start_child``).
    A timer has the GPU alone and code blocks share it (``gpu_turn``); a page lets it go while it compiles
    (``while_compiling``). ``spans``: each page's start and end, in seconds from the first start."""

    def __init__(self, jobs, function):
        self.jobs, self.function = jobs, function
        self.running = {}  # key: (pid, fd, start, chunks)
        self.done = {}  # key: (seconds, data, status)
        self.first = self.last = None  # monotonic seconds: the first start, the last end
        self.spans = {}  # key: (start, end) in seconds from the first start

    def start(self, key, *args):
        if key in self.running or key in self.done:
            return
        fds = [fd for _, fd, _, _ in self.running.values()]
        pid, fd = start_child(self.function, *args, close=fds)
        now = time.monotonic()
        self.first = self.first if self.first is not None else now
        self.running[key] = (pid, fd, now, [])

    def free(self):
        return max(0, self.jobs - len(self.running))

    def _read(self, timeout):
        """Read what the running children wrote within ``timeout`` seconds; reap those that closed their pipe, and
        those that exited while a process they started still holds it open (what they wrote is in the pipe)."""
        fds = {fd: key for key, (_, fd, _, _) in self.running.items()}
        if not fds:
            return
        ready, _, _ = select.select(list(fds), [], [], timeout)
        for fd in ready:
            key = fds[fd]
            pid, _, _, chunks = self.running[key]
            chunk = os.read(fd, 1 << 20)
            if chunk:
                chunks.append(chunk)
                continue
            _, status = os.waitpid(pid, 0)
            self._done(key, status)
        for key, (pid, fd, _, chunks) in list(self.running.items()):
            exited, status = os.waitpid(pid, os.WNOHANG)
            if not exited:
                continue
            os.set_blocking(fd, False)
            try:
                while chunk := os.read(fd, 1 << 20):
                    chunks.append(chunk)
            except BlockingIOError:  # all it wrote is read; a process it left holds the pipe open
                pass
            self._done(key, status)

    def _done(self, key, status):
        pid, fd, start, chunks = self.running.pop(key)
        os.close(fd)
        self.last = time.monotonic()
        self.done[key] = (self.last - start, b"".join(chunks), status)
        self.spans[key] = (start - self.first, self.last - self.first)

    def wait(self, key, more=()):
        """The (seconds, value) of the page ``key``'s child, its exception raised (ChildProcessError if it died);
        ``more``: (key, *args) of pages to start, in order, whenever fewer than ``jobs`` run."""
        more = list(more)
        while key not in self.done:
            while more and self.free():
                self.start(*more.pop(0))
            self._read(1.0)
        seconds, data, status = self.done.pop(key)
        return seconds, finish_child(data, status)

    def drain(self):
        """Wait for the pages started ahead that no one asked for; returns their keys."""
        while self.running:
            self._read(1.0)
        left, self.done = sorted(self.done), {}
        return left


# The GPU's turn: where the build runs pages side by side (SOL_TIMED_JOBS), a timer has the GPU alone and code blocks
# share it. A lock on the file SOL_GPU_TURN names: a timer (do_bench, timeit, Inductor's and Helion's autotuners) takes
# it exclusively, a code block shared. So no page's GPU work runs while another page times, and the pages' checks, data
# and graph captures overlap one another. A page lets it go while it compiles on the CPU (``while_compiling``: Dynamo's
# tracing, Helion's code generation), never inside a timer, and only after the GPU has finished what this process gave
# it. A second lock (the gate, SOL_GPU_TURN + ".gate") puts waiting timers first, together: a timer holds it shared from
# its wait to its end, and a block passes it alone (takes it exclusively and lets go) before it takes the shared lock.
# So no block starts while a timer waits or runs: the timers asked for while blocks run go back to back, then the blocks
# that waited start together. (A block let in between two waiting timers would make the pages take turns one block and
# one timer at a time: dev/DESIGN.md has the figures.) The lock is the process's: ``shared`` and ``exclusive`` count its
# holders (the main thread's code block and timers, and any other thread's timer), and the lock follows them: exclusive
# while any timer runs. A lock moves from shared to alone and back by letting go first: the thread that moves it waits,
# but where a timer on another thread moves it, the main thread's code runs on meanwhile (no page times on a thread of
# its own).
# A page that times again at once keeps the turn: where the main thread's last timer followed the one before it within
# ``LINGER_GAP`` seconds of the page's own work (51's and 52's pairs of runs: nothing between them), its timer's end
# keeps the lock alone for the next, for at most ``LINGER_CAP`` seconds in a row; the page's work between them runs
# alone too. Else each of its timers waits for the blocks of every page beside it: 0.2-0.4 s a timer at 6 pages, 480
# timers a page. The block's end, a compile (``while_compiling``) and any other move of the lock let it go. A longer
# gap (10 ms: most pages' checks and graph captures between timers) ran more of the pages' work alone and the pass
# no faster (dev/DESIGN.md).
SHARED, EXCLUSIVE = "shared", "exclusive"  # the lock's modes, and the names of their holders' counts in _turn
LINGER_GAP, LINGER_CAP = 0.001, 1.0
_turn = {"fd": None, "gate": None, "mode": None, SHARED: 0, EXCLUSIVE: 0, "depth": 0, "timing": 0, "waited": 0.0}
_turn |= {"resumed": -float("inf"), "gap": float("inf"), "kept": 0}  # the main thread's timers: kept the lock for next
_turn_held = {"since": 0.0, SHARED: 0.0, EXCLUSIVE: 0.0}  # seconds this process held the lock shared, alone
_turn_guard = threading.Lock()


def _gpu_idle():
    """Wait for the GPU work this process queued: torch's (not inside a CUDA graph's capture, which queues none), and
    JAX's, which torch's synchronize does not see where torch never started CUDA (``_primary_contexts_idle``)."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized() and not torch.cuda.is_current_stream_capturing():
            torch.cuda.synchronize()
    except RuntimeError:  # a GPU in a bad state: the page's own error says so
        pass
    if "jax" in sys.modules:
        _primary_contexts_idle()


@functools.cache
def _cuda_driver():
    """CUDA's driver library, loaded once a process; None where there is none."""
    import ctypes

    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def _started_gpus(cuda):
    """The CUdevice of each GPU whose primary context this process has started (torch's and XLA's work runs there),
    through CUDA's driver ``cuda``; None where the driver cannot be asked."""
    import ctypes

    count, started = ctypes.c_int(), []
    if cuda is None or cuda.cuInit(0) or cuda.cuDeviceGetCount(ctypes.byref(count)):
        return None
    for ordinal in range(count.value):
        device, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(device), ordinal) or cuda.cuDevicePrimaryCtxGetState(
            device, ctypes.byref(flags), ctypes.byref(active)
        ):
            return None
        if active.value:
            started.append(device)
    return started


def _primary_contexts_idle():
    """``cuCtxSynchronize`` on each GPU's primary context that this process has started, through CUDA's driver: every
    stream of it, whoever made them (XLA runs JAX's work in the primary context, as torch does). Returns the number
    of contexts waited for, or None where the driver cannot be asked."""
    import ctypes

    cuda = _cuda_driver()
    devices, done = _started_gpus(cuda), 0
    if devices is None:  # no NVIDIA driver: no GPU work to wait for
        return None
    for device in devices:
        context = ctypes.c_void_p()
        if cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device):
            continue
        try:
            if cuda.cuCtxPushCurrent_v2(context) == 0:
                cuda.cuCtxSynchronize()
                cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
                done += 1
        finally:
            cuda.cuDevicePrimaryCtxRelease_v2(device)
    return done


def _primary_contexts_reset():
    """``cuDevicePrimaryCtxReset_v2`` on each GPU's primary context that this process has started: all its GPU memory
    freed at once (torch's, XLA's, its CUDA graphs' and kernels'). Nothing may use CUDA in this process after. Returns
    the number of contexts reset, or None where the driver cannot be asked."""
    cuda = _cuda_driver()
    devices = _started_gpus(cuda)
    return None if devices is None else sum(cuda.cuDevicePrimaryCtxReset_v2(device) == 0 for device in devices)


def _gpu_started():
    torch = sys.modules.get("torch")
    return "jax" in sys.modules or bool(torch is not None and torch.cuda.is_initialized())


def _leave_the_gpu_in_turn():
    """A page's process, done (its value sent): free its GPU memory with the GPU's turn held, shared, and keep the
    turn until the process is gone. The driver frees what a process leaves as it exits, and that slows another
    process's kernels meanwhile (an H200: half a copy's calls over 3% slower, up to 1.3x, for 0.2 s as a process
    that held 60 GB exited; dev/DESIGN.md), so no timer runs then."""
    if not os.environ.get("SOL_GPU_TURN") or not _gpu_started():
        return
    _hold(SHARED)
    _primary_contexts_reset()


def _settle():
    """Move this process's lock to what its holders need (called under ``_turn_guard``)."""
    import fcntl

    want = EXCLUSIVE if _turn[EXCLUSIVE] else SHARED if _turn[SHARED] else None
    if want == _turn["mode"]:
        return
    if _turn["mode"]:  # let go first (the lock is not upgraded in place): two pages upgrading would wait for each other
        _gpu_idle()
        fcntl.flock(_turn["fd"], fcntl.LOCK_UN)
        if _turn["mode"] == EXCLUSIVE:  # this timer is done: it no longer holds the blocks back
            fcntl.flock(_turn["gate"], fcntl.LOCK_UN)
        _turn_held[_turn["mode"]] += time.monotonic() - _turn_held["since"]
        _turn["mode"] = None
    if not want:
        return
    if _turn["fd"] is None:  # opened in this process: a descriptor another process shares shares its lock
        path = os.environ["SOL_GPU_TURN"]
        _turn["fd"] = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        _turn["gate"] = os.open(path + ".gate", os.O_RDWR | os.O_CREAT, 0o644)
    start = time.monotonic()
    if want == EXCLUSIVE:  # the gate shared from the wait to the timer's end: no block takes the shared lock meanwhile
        fcntl.flock(_turn["gate"], fcntl.LOCK_SH)
        try:
            fcntl.flock(_turn["fd"], fcntl.LOCK_EX)
        except BaseException:  # not taken (an interrupted wait): the gate let go too
            fcntl.flock(_turn["gate"], fcntl.LOCK_UN)
            raise
    else:  # a block passes the gate alone, once no timer waits or runs: the timers queued meanwhile run back to back
        try:
            fcntl.flock(_turn["gate"], fcntl.LOCK_EX)
        finally:  # let go however the wait ended (unlocking a lock not taken does nothing)
            fcntl.flock(_turn["gate"], fcntl.LOCK_UN)
        fcntl.flock(_turn["fd"], fcntl.LOCK_SH)
    _turn_held["since"] = time.monotonic()
    _turn["waited"] += _turn_held["since"] - start
    _turn["mode"] = want


def _hold(mode):
    with _turn_guard:
        _turn[mode] += 1
        try:
            _settle()
        except BaseException:  # not taken (an interrupted wait): this holder is not counted
            _turn[mode] -= 1
            raise


def _release(mode, linger=False):
    with _turn_guard:
        _turn[mode] = max(0, _turn[mode] - 1)
        if linger and _turn["mode"] == EXCLUSIVE and _turn[SHARED] and not _turn[EXCLUSIVE]:
            if _turn["gap"] < LINGER_GAP and time.monotonic() - _turn_held["since"] < LINGER_CAP:
                _turn["kept"] += 1
                return  # the lock stays alone, for this page's next timer
        _settle()


def _main_thread():
    return threading.current_thread() is threading.main_thread()


def gpu_turn(fn, timer=True):
    """fn, called with the GPU's turn held (where SOL_GPU_TURN names a lock file; else as it is): alone for a
    ``timer``, which ``while_compiling`` never interrupts; shared with other pages' code blocks otherwise."""

    def with_turn(*args, **kwargs):
        if not os.environ.get("SOL_GPU_TURN"):
            return fn(*args, **kwargs)
        main, mode = _main_thread(), EXCLUSIVE if timer else SHARED
        outer_timer = main and timer and not _turn["timing"]  # the page's own timer, not one inside another
        if outer_timer:  # the page's own work since its last timer (its waits for the turn left out)
            _turn["gap"] = time.monotonic() - _turn["resumed"]
        _hold(mode)
        if main:
            _turn["depth"] += 1
            _turn["timing"] += timer
        try:
            return fn(*args, **kwargs)
        finally:
            if main:
                _turn["timing"] -= timer
                _turn["depth"] -= 1
            _release(mode, linger=outer_timer)
            if outer_timer:
                _turn["resumed"] = time.monotonic()

    return with_turn


def while_compiling(fn):
    """fn, called with the main thread's shared turn let go where it holds one outside a timer (compiling on the
    CPU: another page may time meanwhile, once this one's queued work is done), and taken again after."""

    def without_turn(*args, **kwargs):
        if not _turn["depth"] or _turn["timing"] or not _main_thread():
            return fn(*args, **kwargs)
        depth, _turn["depth"] = _turn["depth"], 0  # all shared: the main thread is in no timer
        try:
            with _turn_guard:
                _turn[SHARED] -= depth
                _settle()
            return fn(*args, **kwargs)
        finally:
            try:
                with _turn_guard:
                    _turn[SHARED] += depth
                    _settle()
            finally:
                _turn["depth"] = depth

    return without_turn


# What most pages import, imported once here so that each page's process starts with them (a fork copies them):
# none of them starts CUDA (checked below). JAX is left out: tutorial 05 sets XLA's variables before importing it.
PREIMPORT = (
    "triton",
    "triton.language",
    "triton.testing",
    "pandas",
    "matplotlib.pyplot",
    "torch._dynamo",
    "torch._inductor.compile_fx",
    "liger_kernel.ops.layer_norm",
    "liger_kernel.ops.rms_norm",
    "liger_kernel.ops.softmax",
    "cutlass",
    "cutlass.torch",
)
# The CuTe DSL (cutlass, 3.3 s) under quack, but not quack itself: importing quack.dsl starts CUDA, which a
# forked child cannot start again (H200, quack 0.6.5, nvidia-cutlass-dsl 4.8.1; probe in the design record).


def _cuda_works():
    import torch

    return torch.ones(4, device="cuda").add_(1).sum().item()


def preimport(modules=PREIMPORT, gpu=False):
    """Import what the pages share into this process (those installed); on a GPU, check that a forked child can
    still start CUDA, that is, that no import started it here. Returns the modules imported."""
    import importlib

    done = []
    for name in modules:
        try:
            importlib.import_module(name)
            done.append(name)
        except Exception:  # not installed, or not importable here: the page imports it itself
            pass
    if gpu:
        try:
            assert run_in_child(_cuda_works) == 8.0
        except Exception as err:
            raise RuntimeError(
                f"after importing {', '.join(done)} into the build's process, a page's process cannot "
                f"use CUDA ({type(err).__name__}: {err}); one of them starts CUDA on import: build with "
                "SOL_PREIMPORT=0"
            ) from err
    return done


_preimported = []  # what the build's process imported for its pages, once (``_preimport_once``)


def _preimport_once(gpu):
    """``preimport`` into the build's process, once a build, before the first page's process is forked (a warm-up's
    or the timed pass's); not where ``SOL_PREIMPORT=0``."""
    if _preimported or os.environ.get("SOL_PREIMPORT", "1") == "0":
        return
    start = time.monotonic()
    _preimported.extend(preimport(gpu=gpu) or ["none"])
    _logger.info(f"phase pre-import: {time.monotonic() - start:.1f} s ({len(_preimported)} modules the pages share)")


class AfterImport:
    """A finder on ``sys.meta_path`` that calls ``then(module)`` once the module ``name`` is imported (by the page,
    later): how a page's process wraps what it has not imported yet."""

    def __init__(self, name, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path=None, target=None):
        import importlib.util

        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # the module's own finder, then its loader, run as they would
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute, then = spec.loader.exec_module, self.then

        def exec_module(module):
            execute(module)
            then(module)

        try:
            spec.loader.exec_module = exec_module
        except AttributeError:  # a loader that takes no attribute: imported as it is, unpatched
            pass
        return spec


def _helion_takes_turns(module):
    """Helion's autotuner times configs with a timer of its own: its search (a point with no stored config) holds
    the GPU's turn throughout. Its code generation for a stored config (``set_config``) and its tracing of a new
    shape (``BoundKernel``'s making: once a shape, ``Kernel.bind`` finds it after) let the turn go."""
    bound = getattr(module, "BoundKernel", None)
    if bound is None:
        return
    if hasattr(bound, "autotune"):
        bound.autotune = gpu_turn(bound.autotune)
    if hasattr(bound, "set_config"):
        bound.set_config = while_compiling(bound.set_config)
    bound.__init__ = while_compiling(bound.__init__)


def _let_go_while_compiling():
    """Dynamo's compile of a frame (its tracing, AOT autograd, Inductor's code generation or its cache's load) lets
    the GPU's turn go: CPU work, the longest a warm page does between its timers."""
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    if convert_frame is not None and callable(getattr(convert_frame, "_compile", None)):
        convert_frame._compile = while_compiling(convert_frame._compile)


# Code blocks that hold the GPU's turn alone, compiling too, where pages run side by side: {page stem: what such a
# block's code holds}. They time what no timer above sees: 14, a wall clock around each launch's first call (its
# compiles and autotuning's search); 62, its ranks (processes of their own) with CUDA events. The page's other blocks
# share the turn as any page's do.
ALONE = {"14_autotuning_against_a_launch_model": "sweep(ways())", "62_cross_entropy_vocab_parallel": '"bench_task"'}
# JAX: XLA times candidate kernels on the GPU as it compiles a program that JAX's cache does not hold (its
# autotuning), with a timer no hook here sees. Its compile holds the turn alone (``_xla_compiles_alone``); a JAX
# page's blocks share it as others do once that is in place, and hold it alone where it cannot be (another JAX). A
# program's lowering (to XLA's or Mosaic's IR) is CPU work: the turn is let go meanwhile, as for Dynamo's compiles
# (``_jax_lowers_without_the_turn``). Its load from JAX's cache is not: it loads the executable onto the GPU.
_xla = {"wrapped": False}


def _xla_compiles_alone(module):
    """Wrap ``jax._src.compiler``'s compile of a program for XLA (not its load from JAX's cache) in the GPU's turn,
    alone."""
    compile_ = getattr(module, "backend_compile_and_load", None)
    if callable(compile_):
        module.backend_compile_and_load = gpu_turn(compile_)
        _xla["wrapped"] = True


def _jax_lowers_without_the_turn(module):
    """Wrap ``jax._src.interpreters.pxla``'s lowering of a traced program (run where no lowering is cached) in
    ``while_compiling``."""
    lower = getattr(module, "lower_sharding_computation", None)
    if callable(lower):
        module.lower_sharding_computation = while_compiling(lower)


def _profiled(function, *args):
    """function(*args) (sphinx-gallery running a page), and where its time went: the seconds of each code block
    (by its first line), those spent inside the timers (do_bench, timeit.repeat, timeit.timeit) with their number of
    calls and the seconds the page waited for the GPU's turn (``gpu_turn``: shared through each code block, alone
    in a timer, Inductor's or Helion's autotuning, XLA's compile and an ``ALONE`` block; let go while Dynamo or
    Helion compiles or JAX lowers outside those),
    and two costs a cold build may pay where a warm one does not: modules compiled from source (no bytecode cached
    for them yet) and Triton compiles in this process, each [seconds, count], then the three slowest of those
    compiles (seconds, kernel_key, what the page's warm-up compiled of it). Meant for a page's own process: what it
    patches is left patched."""
    import importlib.machinery
    import sphinx_gallery.gen_rst as gen_rst
    import timeit

    blocks, timers, sources, kernels = [], [0.0, 0], [0.0, 0], []  # kernels: (seconds, kernel_key) a compile
    execute = gen_rst.execute_code_block
    stem = pathlib.Path(str(args[0])).stem  # args[0]: the page's file
    try:
        jax_page = "import jax" in pathlib.Path(str(args[0])).read_text()
    except (OSError, UnicodeError):  # no source to read (a test's page): none imports JAX
        jax_page = False
    shared, alone = gpu_turn(execute, timer=False), gpu_turn(execute, timer=True)
    marker = ALONE.get(stem)  # the code of this page's blocks that hold the turn alone

    def execute_code_block(compiler, block, *rest, **kwargs):
        start = time.monotonic()
        held = alone if jax_page and not _xla["wrapped"] or marker and marker in block[1] else shared
        try:  # a code block holds the GPU's turn (text blocks pass through here too)
            return (held if block[0] == "code" else execute)(compiler, block, *rest, **kwargs)
        finally:
            if block[0] == "code":  # a Block is (type, content, lineno); text blocks pass through here too
                blocks.append((block[2], time.monotonic() - start))

    def timed(timer, tally=timers):
        def wrapper(*a, **k):
            start = time.monotonic()
            try:
                return timer(*a, **k)
            finally:
                tally[0] += time.monotonic() - start
                tally[1] += 1

        return wrapper

    gen_rst.execute_code_block = execute_code_block
    if hasattr(gen_rst, "clean_modules"):  # around the page: its reset_modules free GPU memory
        gen_rst.clean_modules = gpu_turn(gen_rst.clean_modules, timer=False)
    timeit.repeat, timeit.timeit = gpu_turn(timed(timeit.repeat)), gpu_turn(timed(timeit.timeit))
    try:  # imported before the fork (PREIMPORT), or here
        import triton.testing

        triton.testing.do_bench = gpu_turn(timed(triton.testing.do_bench))
    except ImportError:  # no Triton: no do_bench to time with
        pass
    hooks = [
        ("helion.runtime.kernel", _helion_takes_turns),
        ("jax._src.compiler", _xla_compiles_alone),
        ("jax._src.interpreters.pxla", _jax_lowers_without_the_turn),
    ]
    for name, then in hooks:
        if name in sys.modules:
            then(sys.modules[name])
        else:  # the page imports it
            sys.meta_path.insert(0, AfterImport(name, then))
    _let_go_while_compiling()
    if "torch._inductor" in sys.modules:  # imported before the fork; its autotuner times its launch configs here
        try:
            from torch._inductor.runtime.benchmarking import benchmarker

            benchmarker.benchmark_gpu = gpu_turn(benchmarker.benchmark_gpu)
        except (ImportError, AttributeError):  # another Inductor: its timing goes without the turn
            pass
    loader = importlib.machinery.SourceFileLoader
    loader.source_to_code = timed(loader.source_to_code, sources)  # a module with no bytecode cached for it
    if "triton.compiler" in sys.modules:  # a kernel's launcher imports compile from here at its first call
        compile_ = sys.modules["triton.compiler"].compile

        def compile_named(src, *a, **k):  # each kernel's seconds and key: a slow one was compiled, not found cached
            start = time.monotonic()
            try:
                return compile_(src, *a, **k)
            finally:
                kernels.append((time.monotonic() - start, kernel_key(src, _options(a, k))))

        sys.modules["triton.compiler"].compile = compile_named
        if "triton" in sys.modules:  # Inductor calls triton.compile, the same function under the package's name
            sys.modules["triton"].compile = compile_named
    folder = os.environ.get("SOL_WARMUP_RECORDS")  # set where this build's warm-up ran (_warm_up)
    record = folder and pathlib.Path(folder, f"{stem}.compiled")
    result = function(*args)
    try:
        warmed = record.read_text().split("\n") if record and record.exists() else None
    except (OSError, UnicodeError):  # no record to read: nothing said of the warm-up
        warmed = None
    slow = [(seconds, key, warm_up_had(key, warmed)) for seconds, key in sorted(kernels, reverse=True)[:3]]
    compiles = (sum(seconds for seconds, _ in kernels), len(kernels))
    held = (_turn["waited"], _turn_held[EXCLUSIVE], _turn_held[SHARED], _turn["kept"])
    return result, blocks, (*timers, *held), (tuple(sources), compiles, slow)


def warm_up_had(key, warmed):
    """What the page's warm-up compiled of a kernel (``key`` from kernel_key; ``warmed``: the keys its warm-up
    recorded, or None where there is no record): the same source in the same cache folder, the same source in
    another folder, another source of that kernel (other arguments' types, specialization or constants), or none."""
    if warmed is None:
        return ""
    name, digest, folder = key.split(" ", 2)
    found = [w.split(" ", 2) for w in warmed if w.count(" ") >= 2]
    if [name, digest, folder] in found:
        return "the warm-up compiled the same"
    elsewhere = [w[2] for w in found if w[:2] == [name, digest]]
    if elsewhere:
        return f"the warm-up compiled the same into {elsewhere[0]}, this page looked in {folder}"
    return "the warm-up compiled it for other arguments" if any(w[0] == name for w in found) else "not in the warm-up"


SLOW_COMPILE = 0.1  # seconds: a Triton kernel found in the on-disk cache loads in a few milliseconds


def where_the_time_went(blocks, timers, loads, cells=3):
    """A log line's tail: the seconds in the page's code, the timers' share of them (and what the page waited for the
    GPU's turn, held it alone and shared it: ``timers[2:5]`` where there are), the slowest code blocks, and
    the seconds spent compiling modules from source and Triton kernels in the page's process (``loads``), with the
    slowest kernels by name where one took ``SLOW_COMPILE`` or more (compiled there, not found in the cache) and what
    the page's warm-up compiled of it."""
    slow = sorted(blocks, key=lambda b: -b[1])[:cells]
    (source_s, sources), (triton_s, kernels), named = loads
    compiled = [(seconds, key, why) for seconds, key, why in named if seconds >= SLOW_COMPILE]
    return (
        f"code {sum(b[1] for b in blocks):.1f} s in {len(blocks)} cells; "
        f"timers {timers[0]:.1f} s in {timers[1]} calls"
        + (f", {timers[2]:.1f} s more waiting for the GPU's turn" if len(timers) > 2 and timers[2] >= 0.05 else "")
        + (f", {timers[3]:.1f} s holding it alone, {timers[4]:.1f} s sharing it" if sum(timers[3:5]) else "")
        + (f", {timers[5]} timers kept it for the next" if len(timers) > 5 and timers[5] else "")
        + "; slowest cells: "
        + ", ".join(f"line {line} {seconds:.1f} s" for line, seconds in slow)
        + f"; modules compiled from source {sources} in {source_s:.1f} s; Triton compiles {kernels} in {triton_s:.1f} s"
        + ("; slowest: " if compiled else "")
        + ", ".join(
            f"{key.split(' ')[0]} {seconds:.1f} s" + (f" ({why})" if why else "") for seconds, key, why in compiled
        )
    )


# The timed pass's pages at once: the pass took 182 s with 4, 165 s with 6 (a warm build, H200, 16 cores). More pages
# wait longer for each timer's turn: the timers, 75 s of it in all, run one at a time whatever the count
TIMED_JOBS = 6
PAGE_GPU_GIB = 16  # a page's GPU memory at most, with its CUDA context (the largest peak, 61's: 12.3 GB on an H200)


def _gpu_memory_gib():
    """GPU 0's memory in GiB, asked of nvidia-smi (this process must not start CUDA); 0 where it cannot say."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        return float(out.split()[0]) / 1024
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return 0.0


def timed_jobs(gpu, memory_gib=None):
    """How many pages the timed pass runs side by side: ``SOL_TIMED_JOBS``; by default, on a GPU, as many as the GPU
    holds (``PAGE_GPU_GIB`` each; its memory from nvidia-smi), at most a page for two cores and at most ``TIMED_JOBS``;
    1 without a GPU."""
    jobs = int(os.environ.get("SOL_TIMED_JOBS") or 0)
    if jobs > 0:
        return jobs
    if not gpu:
        return 1
    memory_gib = _gpu_memory_gib() if memory_gib is None else memory_gib
    return max(1, min(TIMED_JOBS, (os.cpu_count() or 1) // 2, int(memory_gib // PAGE_GPU_GIB)))


def _isolate_pages(app):
    """builder-inited, before sphinx-gallery: its generate_file_rst runs each page in a child process, the pages
    sphinx-gallery will ask for next started ahead (``Ahead``, ``timed_jobs``), taking turns on the GPU."""
    import sphinx_gallery.gen_rst as gen_rst

    if getattr(gen_rst.generate_file_rst, "sol_isolated", False):
        return
    conf = app.config.sphinx_gallery_conf
    gpu = bool(conf.get("plot_gallery")) and _gpu()
    if conf.get("plot_gallery") and gallery_runs(conf):  # no page to run: nothing to import
        _preimport_once(gpu)  # where the warm-up has not
    in_process = gen_rst.generate_file_rst
    jobs = timed_jobs(gpu)
    if jobs > 1:  # the lock the pages' timers take turns on
        os.environ["SOL_GPU_TURN"] = str(pathlib.Path(app.outdir).parent / ".sol-gpu-turn")
        _logger.info(f"timed pass: {jobs} pages at a time, taking turns on the GPU")

    def run_page(fname, target_dir, src_dir, conf):  # the folders sphinx-gallery makes as it enters a subsection
        pathlib.Path(target_dir, "images", "thumb").mkdir(parents=True, exist_ok=True)
        return _profiled(in_process, fname, target_dir, src_dir, conf)

    ahead = _pages_time[2] = Ahead(jobs, run_page)
    order = []  # (key, fname, target_dir, src_dir, gallery_conf) of each page the build runs, the longest first
    asked = set()  # the keys sphinx-gallery asked for: run, or running

    def generate_file_rst(fname, target_dir, src_dir, gallery_conf):
        src = pathlib.Path(src_dir, fname)
        key, profile = str(src), ""
        started = key in ahead.running or key in ahead.done  # its run ahead wrote its checksum: do not ask will_run
        if not started and not will_run(src, pathlib.Path(target_dir, fname), gallery_conf):
            return in_process(fname, target_dir, src_dir, gallery_conf)  # not run: nothing to isolate
        if not order:  # asked once: the pages the gallery runs, in every folder, start ahead of their turn
            order.extend(longest_first(gallery_runs(gallery_conf), page_seconds(), _warm_seconds))
        asked.add(key)
        more = [run for run in order if run[0] not in asked]
        start = time.monotonic()
        ahead.start(key, fname, target_dir, src_dir, gallery_conf)
        try:
            seconds, (result, *profiled) = ahead.wait(key, more)
            profile = f"; {where_the_time_went(*profiled)}"
        except ChildProcessError as err:  # the page as text only, unrun, and its failure for sphinx-gallery
            unrun = copy.copy(gallery_conf)
            unrun["plot_gallery"] = False
            intro, title, _, out_vars = in_process(fname, target_dir, src_dir, unrun)
            out_vars["formatted_exception"] = str(err)
            result = intro, title, (time.monotonic() - start, 0.0), out_vars
            seconds = time.monotonic() - start
        _pages_time[0] += seconds
        _pages_time[1] += 1
        span = ahead.spans.get(key) if ahead.jobs > 1 else None
        _logger.info(
            f"page {pathlib.Path(fname).stem}: {seconds:.1f} s in its own process"
            + (f" (+{span[0]:.0f} s to +{span[1]:.0f} s of the pass)" if span else "")
            + (" (failed)" if "formatted_exception" in result[3] else "")
            + profile
        )
        return result

    generate_file_rst.sol_isolated = True
    gen_rst.generate_file_rst = generate_file_rst


_gallery_done = []  # when sphinx-gallery had run the pages (monotonic seconds)


def _report_pages(app):
    """builder-inited, after sphinx-gallery: the timed pass's total (its wall time where pages ran side by side)."""
    _gallery_done.append(time.monotonic())
    seconds, pages, ahead = _pages_time
    if ahead and (left := ahead.drain()):  # not asked for (another order than the file names'): run, not shown
        _logger.warning(f"timed pass: pages run ahead that sphinx-gallery did not ask for: {', '.join(left)}")
    if pages:
        wall = ahead.last - ahead.first if ahead and ahead.jobs > 1 and ahead.last else None
        if wall:  # the next pass starts the longest pages first
            record_page_seconds({pathlib.Path(key).stem: end - start for key, (start, end) in ahead.spans.items()})
        _logger.info(
            f"phase timed pages: {seconds:.0f} s for {pages} pages"
            + (f", {ahead.jobs} at a time: {wall:.0f} s from the first start to the last end" if wall else "")
        )


def _report_total(app, exception):
    if _gallery_done:  # Sphinx's own part: reading the pages sphinx-gallery wrote, writing the HTML
        _logger.info(f"phase reading and writing: {time.monotonic() - _gallery_done[0]:.0f} s")
    _logger.info(f"build: {time.monotonic() - _started:.0f} s from configuration to the end")


def setup(app):
    app.connect("builder-inited", _warm_up, priority=450)  # sphinx-gallery runs the pages at 500
    app.connect("builder-inited", _isolate_pages, priority=460)
    app.connect("builder-inited", _report_pages, priority=850)
    app.connect("build-finished", _report_total)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
