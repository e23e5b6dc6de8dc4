"""The staged RMSNorm forward of deep dive 42 (a Gluon kernel that copies a 16-bit row into shared memory).

Without a GPU the kernel is compiled for an H100 (sm_90a) with the installed Triton (the script of
tests/test_layer_norm_staged.py, run in a fresh process) and what the compiler made of it is checked: the
shared memory a program takes, 16-byte asynchronous copies only, registers under the launcher's cap with
nothing spilled (where ptxas is bundled). With a GPU the kernel also runs against float64.
"""

import inspect
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, load_tutorial
from test_layer_norm_staged import COMPILE

ON_GPU = torch.cuda.is_available()
STEM = "42_rms_norm_staged_gluon"
PAGE = ROOT / "tutorials" / "deep_dives" / f"{STEM}.py"
POINTERS = ("x_ptr", "w_ptr", "y_ptr", "rstd_ptr")  # in the kernel's order


@pytest.fixture(scope="module")
def page():
    return load_tutorial(STEM)


def test_staged_kernel_compiles_for_hopper(page, tmp_path):
    """Rows of 32768 (whole chunks) and 20000 columns (a masked last chunk), with and without a weight."""
    cfg = page["_staged_config"](2)
    # the launcher's own meta-parameters for an H100 (65536 registers an SM)
    metas = [dict(page["staged_meta"](n, 2, cfg, 65536), HAS_WEIGHT=w) for n in (32768, 20000) for w in (True, False)]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    for dtype in ("bf16", "fp16"):
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                COMPILE,
                str(PAGE),
                "rms_norm_fwd_staged_kernel",
                json.dumps(POINTERS),
                dtype,
                json.dumps(metas),
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        assert proc.returncode == 0, f"compiling the staged kernel for sm_90a failed:\n{proc.stderr[-4000:]}"
        for result, meta in zip(json.loads(proc.stdout.strip().splitlines()[-1]), metas):
            staged_bytes = meta["CHUNKS"] * cfg["CHUNK_N"] * 2
            assert staged_bytes <= result["shared"] <= staged_bytes + 1024, result  # the row, and reduction scratch
            assert cfg["PER_SM"] * (result["shared"] + 1024) <= 233472, result  # PER_SM rows in an H100's 228 KB
            assert result["copy_sizes"] == [16], f"expected 16-byte cp.async copies only: {result}"
            if "registers" in result:  # ptxas ran: under the cap, nothing spilled
                assert result["registers"] <= result["options"]["maxnreg"] and result["spill_bytes"] == 0, result


def test_staged_config(page):
    """16-bit rows of 16 K to 32 K only; PER_SM programs' registers and rows fit an H100's SM."""
    cfg = page["_staged_config"](2)
    assert page["_staged_config"](4) is None and cfg["MIN_N"] == 16385 and cfg["MAX_N"] == 32768
    meta = page["staged_meta"](32768, 2, cfg, 65536)
    assert meta["VEC"] == 8 and meta["REP"] >= 1 and meta["CHUNKS"] * cfg["CHUNK_N"] == 32768 and meta["EVEN"]
    assert meta["maxnreg"] * 32 * cfg["num_warps"] * cfg["PER_SM"] <= 65536
    assert cfg["PER_SM"] * 32768 * 2 <= 233472
    assert not page["staged_meta"](20000, 2, cfg, 65536)["EVEN"]


def test_core_kernel_is_tutorial_04s(page):
    """The core column runs tutorial 04's fused kernel and the launch parameters tutorial 04 gives it."""
    core = load_tutorial("04_rms_norm")
    assert inspect.getsource(page["rms_norm_fwd_kernel"].fn) == inspect.getsource(core["rms_norm_fwd_kernel"].fn)
    assert inspect.getsource(page["min_tile_bytes"]) == inspect.getsource(core["min_tile_bytes"])
    assert inspect.getsource(page["_fwd_config"]) == inspect.getsource(core["_fwd_config"])
    assert (page["BYTES_PER_THREAD"], page["LATENCY"]) == (core["BYTES_PER_THREAD"], core["LATENCY"])
    for n in (1, 300, 4096, 16384, 20000, 32768):
        kernel, meta, grid = core["_fwd_config"](1000, n, 2)
        assert kernel is core["rms_norm_fwd_kernel"], n  # 16-bit rows to 32 K are held whole in 04
        block_n = 1 << (n - 1).bit_length()
        block_m = max(1, page["min_tile_bytes"]() // (block_n * 2))
        warps = min(32, max(4, block_m * block_n * 2 // (32 * page["BYTES_PER_THREAD"])))
        assert meta == dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps), n


@pytest.mark.skipif(ON_GPU, reason="checks the interpreter's fallback")
@pytest.mark.parametrize("has_weight", [True, False])
def test_core_kernel_without_a_gpu(page, has_weight):
    """Under the interpreter nothing is staged; the core kernel's y and rstd match float64 (NaN-poisoned first)."""
    torch.manual_seed(3)
    x = (torch.randn(3, 20000) * 3).to(torch.bfloat16)
    w = (1 + 0.5 * torch.randn(20000)).to(torch.bfloat16) if has_weight else None
    assert page["staged_plan"](x) is None
    y, rstd = torch.full_like(x, float("nan")), torch.full((3,), float("nan"))
    assert page["rms_norm_staged_forward"](x, w, y, rstd, 1e-6) == "fused (core)"
    ref = torch.nn.functional.rms_norm(x.double(), (20000,), None if w is None else w.double(), 1e-6)
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1.6e-2
    r64 = torch.rsqrt(x.double().square().mean(-1) + 1e-6)
    assert torch.allclose(rstd.double(), r64, rtol=1e-5)
    assert "staged" not in page["fns"], "the page must not time a Gluon kernel without a GPU"


def test_bad_input_is_refused(page):
    with pytest.raises(ValueError, match="16-bit rows of up to 32768"):
        page["rms_norm_forward"](torch.randn(2, 64))
    with pytest.raises(ValueError, match="16-bit rows of up to 32768"):
        page["rms_norm_forward"](torch.randn(1, 40000, dtype=torch.bfloat16))


@pytest.mark.skipif(not ON_GPU, reason="Gluon kernels need a CUDA GPU (Triton's interpreter does not run them)")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    "n_cols,stride,staged",
    [
        (16400, 16400, True),
        (20000, 20000, True),
        (32768, 32768, True),
        (32760, 32760, False),
        (32752, 32784, True),
        (16385, 16400, False),
    ],
)
def test_staged_forward_matches_float64(page, dtype, n_cols, stride, staged):
    """Rows the staged kernel takes (whole or masked last chunks, a stride past the row) and rows it leaves to
    the core kernel; with and without a weight; outputs poisoned with NaN first."""
    torch.manual_seed(n_cols)
    x = (torch.randn(67, stride, device="cuda", dtype=dtype) * 3)[:, :n_cols]
    assert (page["staged_plan"](x) is not None) == staged
    for w in ((1 + 0.5 * torch.randn(n_cols, device="cuda")).to(dtype), None):
        y, rstd = torch.full_like(x, float("nan")), torch.full((67,), float("nan"), device="cuda")
        assert (page["rms_norm_staged_forward"](x, w, y, rstd, 1e-6) == "staged (Gluon)") == staged
        ref = torch.nn.functional.rms_norm(x.double(), (n_cols,), None if w is None else w.double(), 1e-6)
        assert ((y.double() - ref).norm() / ref.norm()).item() < (1.2e-2 if dtype == torch.bfloat16 else 2e-3)
        assert torch.allclose(rstd.double(), torch.rsqrt(x.double().square().mean(-1) + 1e-6), rtol=1e-5)
