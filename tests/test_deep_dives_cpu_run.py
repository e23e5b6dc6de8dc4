"""The Triton deep dives run without a GPU as the site's CPU build runs them: each exits 0, says in one sentence that it
measures no speed (in place of its speed tables and their reading), names each peer it leaves out and why, and
prints no speed and no empty line."""

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from conftest import DEVICE, ROOT

NO_SPEED = "No GPU here: this run checks the kernels' values through Triton's interpreter; it measures no speed."
STAGED = f"{NO_SPEED} Gluon kernels do not run in the interpreter: nothing was staged here."
PEERS = (("torch.compile", "torch"), ("Liger-Kernel", "liger_kernel"), ("quack", "quack"))
PAGES = {  # stem: (lines that say it, the peers it names as not measured)
    "11_softmax_long_rows": ([NO_SPEED, NO_SPEED], PEERS),
    "12_softmax_staged_gluon": ([STAGED, NO_SPEED], PEERS),
    "13_launch_heuristics": ([NO_SPEED], ()),
    "14_autotuning_against_a_launch_model": ([NO_SPEED, NO_SPEED], ()),
    "21_layer_norm_wide_forward": ([NO_SPEED, NO_SPEED], PEERS),
    "22_layer_norm_staged_gluon": ([STAGED, NO_SPEED], PEERS),
    "23_layer_norm_wide_backward": ([NO_SPEED, NO_SPEED], PEERS),
    "24_layer_norm_backward_locks": ([NO_SPEED, NO_SPEED], PEERS),
    "31_reduction_rows_and_columns": ([NO_SPEED, NO_SPEED], PEERS[:1]),
    "41_rms_norm_wide_backward": ([NO_SPEED, NO_SPEED], PEERS),
    "42_rms_norm_staged_gluon": ([STAGED, NO_SPEED], PEERS),
}


@pytest.mark.skipif(DEVICE != "cpu", reason="a page's run without a GPU")
@pytest.mark.parametrize("stem", PAGES)
def test_cpu_run_measures_no_speed_and_says_so(stem):
    env = {k: v for k, v in os.environ.items() if k not in ("SOL_RESULTS", "SOL_LOCK")} | {"MPLBACKEND": "Agg"}
    path = ROOT / "tutorials" / "deep_dives" / f"{stem}.py"
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines, (said, peers) = proc.stdout.splitlines(), PAGES[stem]
    assert lines[0].startswith("Built on CPU only, Triton's interpreter") and all(lines), lines
    assert [line for line in lines if line.startswith(NO_SPEED)] == said, lines
    for peer, package in peers:
        why = "not installed" if importlib.util.find_spec(package) is None else "no GPU"
        assert f"{peer}: not measured here ({why})." in lines, lines
    assert not re.search(r"GB/s|% of the copy|as fast as|best peer|x the speed|interpreter timings", proc.stdout), (
        proc.stdout
    )
