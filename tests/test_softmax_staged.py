"""The staged softmax forward of deep dive 12 (a Gluon kernel that copies a 16-bit row into shared memory).

Gluon kernels do not run in Triton's interpreter, so on a machine without a GPU these tests compile the
kernel for an H100 (sm_90a) with the installed Triton and check what the compiler made of it: the
shared memory each program takes, 16-byte asynchronous copies, and, where ptxas is bundled, registers
under the launcher's cap with nothing spilled. With a GPU they also run the kernel against float64.
(The softmax part of tests/test_staged.py.)
"""

import inspect
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, load_tutorial

ON_GPU = torch.cuda.is_available()
PAGE = ROOT / "tutorials" / "deep_dives" / "12_softmax_staged_gluon.py"
KERNEL = "softmax_fwd_staged_kernel"
POINTERS = ("x_ptr", "y_ptr")

# Compiles one page's staged kernel for sm_90a in a fresh process: the test process may run under
# TRITON_INTERPRET=1, in which Triton's own library functions (tl.max, tl.sum) are interpreter objects
# that a compiled kernel cannot call.
COMPILE = r"""
import json, os, re, subprocess, sys, types
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
path, kernel_name, dtype, metas = sys.argv[1], sys.argv[2], sys.argv[4], json.loads(sys.argv[5])
src = open(path).read()
start = src.index("# cp.async from global to shared memory")
end = src.index("# %%", start)
module = types.ModuleType("staged_kernels")
module.__file__ = os.path.join(sys.argv[6], "staged_kernels.py")
open(module.__file__, "w").write(
    "from triton.experimental import gluon\nfrom triton.experimental.gluon import language as gl\n"
    "from triton.experimental.gluon.language.nvidia.ampere import async_copy\n" + src[start:end])
sys.path.insert(0, sys.argv[6])
import staged_kernels
kernel = getattr(staged_kernels, kernel_name)
try:
    from triton.backends.nvidia.compiler import get_ptxas
    try:
        ptxas = get_ptxas(90).path
    except TypeError:
        ptxas = get_ptxas().path
except Exception:
    ptxas = None
out = []
for meta in metas:
    options = dict(num_warps=meta.pop("num_warps"), maxnreg=meta.pop("maxnreg"))
    signature = {p: ("*fp32" if p in ("mean_ptr", "rstd_ptr") else "*" + dtype) for p in json.loads(sys.argv[3])}
    signature.update(n_cols="i32", x_row_stride="i32", y_row_stride="i32")
    if "eps" in kernel.arg_names:
        signature["eps"] = "fp32"
    n_runtime = len(signature)
    # what Triton assumes at a launch on aligned tensors: pointers and integers divisible by 16
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(signature) if name != "eps"}
    for name in meta:
        signature[name] = "constexpr"
    compiled = triton.compile(GluonASTSource(kernel, signature, meta, attrs), target=GPUTarget("cuda", 90, 32),
                              options=options)
    ptx = compiled.asm["ptx"]
    result = dict(meta=meta, options=options, shared=compiled.metadata.shared,
                  copy_sizes=sorted({int(size, 0) for size in re.findall(
                      r"cp\.async\.c[ag]\.shared\.global \[[^\]]*\], \[[^\]]*\], (0x[0-9a-fA-F]+|\d+)", ptx)}))
    if ptxas and os.path.exists(ptxas):
        ptx_file = os.path.join(sys.argv[6], "k.ptx")
        open(ptx_file, "w").write(ptx)
        proc = subprocess.run([ptxas, "-v", "--gpu-name", "sm_90a", ptx_file, "-o", ptx_file + ".cubin"],
                              capture_output=True, text=True)
        regs = re.findall(r"Used (\d+) registers", proc.stderr)
        spills = re.findall(r"(\d+) bytes spill stores", proc.stderr)
        if proc.returncode == 0 and regs:
            result.update(registers=int(regs[0]), spill_bytes=int(spills[0]) if spills else 0)
    out.append(result)
print(json.dumps(out))
"""


def compile_for_hopper(dtype, metas, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            COMPILE,
            str(PAGE),
            KERNEL,
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
    assert proc.returncode == 0, f"compiling {KERNEL} for sm_90a failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_staged_kernel_compiles_for_hopper(tmp_path):
    """The launcher's own meta-parameters (staged_meta on _staged_config's 16-bit entry, for an H100's
    65536 registers per SM) for rows of 32768 (whole chunks) and 20000 columns (a masked last chunk)."""
    page = load_tutorial("12_softmax_staged_gluon")
    cfg = page["_staged_config"](2)
    metas = [page["staged_meta"](n_cols, 2, cfg, 65536) for n_cols in (32768, 20000)]
    for dtype in ("bf16", "fp16"):
        for result, meta in zip(compile_for_hopper(dtype, [dict(m) for m in metas], tmp_path), metas):
            staged_bytes = meta["CHUNKS"] * cfg["CHUNK_N"] * 2
            # the row in shared memory, plus a little scratch for the reductions
            assert staged_bytes <= result["shared"] <= staged_bytes + 1024, result
            # PER_SM programs' rows fit in an H100's 228 KB of shared memory per SM
            assert cfg["PER_SM"] * (result["shared"] + 1024) <= 233472, result
            assert result["copy_sizes"] == [16], f"expected 16-byte cp.async copies only: {result}"
            if "registers" in result:  # ptxas ran: the cap holds and nothing spills
                assert result["registers"] <= result["options"]["maxnreg"] and result["spill_bytes"] == 0, result


def test_staged_config_and_meta():
    """Today's entry (tuned on an H100): 16-bit rows of 16 K to 32 K, pieces of 8192, 8 warps, 3 per SM;
    the register cap lets PER_SM programs share 65536 registers."""
    page = load_tutorial("12_softmax_staged_gluon")
    cfg = page["_staged_config"](2)
    assert cfg == dict(MIN_N=16385, MAX_N=32768, CHUNK_N=8192, num_warps=8, PER_SM=3)
    assert page["_staged_config"](4) is None
    meta = page["staged_meta"](32768, 2, cfg, 65536)
    assert meta == dict(CHUNKS=4, VEC=8, EVEN=True, REP=4, num_warps=8, maxnreg=80)
    assert meta["maxnreg"] * 32 * cfg["num_warps"] * cfg["PER_SM"] <= 65536
    assert not page["staged_meta"](20000, 2, cfg, 65536)["EVEN"]


def test_core_launch_is_todays():
    """The carried core kernel's launch parameters are the core page's (_fused_config)."""
    page, core = load_tutorial("12_softmax_staged_gluon"), load_tutorial("01_fused_softmax")
    assert inspect.getsource(page["min_tile_bytes"]) == inspect.getsource(core["min_tile_bytes"])
    assert (page["BYTES_PER_THREAD"], page["LATENCY"]) == (core["BYTES_PER_THREAD"], core["LATENCY"])
    for n in (1, 300, 4096, 16384, 24576, 32768):
        for size in (2, 4):
            meta = page["_core_meta"](n, size)
            assert (meta["BLOCK_M"], meta["BLOCK_N"], meta["num_warps"]) == core["_fused_config"](n, size)


@pytest.mark.skipif(ON_GPU, reason="checks the interpreter's fallback")
def test_no_staging_without_a_gpu():
    """Under the interpreter the launcher keeps the core kernel (and so the page still runs)."""
    page = load_tutorial("12_softmax_staged_gluon")
    x = torch.randn(3, 32768, dtype=torch.bfloat16)
    assert page["staged_plan"](x) is None
    y = torch.full_like(x, math.nan)
    assert page["softmax_staged_forward"](x, y) == "fused (core)"
    ref = torch.softmax(x.double(), -1)
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1.6e-2
    assert "staged" not in page["providers"](), "the page must not time a Gluon kernel without a GPU"


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


@pytest.mark.skipif(not ON_GPU, reason="Gluon kernels need a CUDA GPU (Triton's interpreter does not run them)")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    "n_cols,stride,staged",
    [
        (16400, 16400, True),
        (20000, 20000, True),
        (32768, 32768, True),
        (32767, 32767, False),
        (32752, 32784, True),
        (16385, 16400, False),
    ],
)
def test_staged_forward_matches_float64(dtype, n_cols, stride, staged):
    """Rows the staged kernel takes (whole chunks or a masked last chunk, a row stride past the row) and
    rows it leaves to the core kernel (length not a multiple of 16): outputs poisoned with NaN first."""
    page = load_tutorial("12_softmax_staged_gluon")
    torch.manual_seed(n_cols)
    x = (torch.randn(67, stride, device="cuda", dtype=dtype) * 3 + 1)[:, :n_cols]
    assert (page["staged_plan"](x) is not None) == staged
    y = torch.full_like(x, float("nan"))
    assert (page["softmax_staged_forward"](x, y) == "staged (Gluon)") == staged
    assert rel_err(y, torch.softmax(x.double(), -1)) < (1.2e-2 if dtype == torch.bfloat16 else 2e-3)


@pytest.mark.skipif(not ON_GPU, reason="Gluon kernels need a CUDA GPU (Triton's interpreter does not run them)")
def test_staged_softmax_special_values_and_determinism():
    """NaN, +inf and -inf rows give what torch gives, and every run gives the same bits."""
    page = load_tutorial("12_softmax_staged_gluon")
    x = torch.randn(8, 32768, device="cuda", dtype=torch.bfloat16)
    x[0] = -float("inf")
    x[1, 5] = float("nan")
    x[2, 7] = float("inf")
    x[3, :16384] = -float("inf")
    x[4, -1] = float("inf")
    assert page["staged_plan"](x) is not None
    y = torch.empty_like(x)
    page["softmax_staged_forward"](x, y)
    ref = torch.softmax(x.float(), -1)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    torch.testing.assert_close(torch.nan_to_num(y.float()), torch.nan_to_num(ref), atol=1e-2, rtol=1e-2)
    x = torch.randn(300, 32768, device="cuda", dtype=torch.bfloat16)
    page["softmax_staged_forward"](x, y := torch.empty_like(x))
    for _ in range(3):
        page["softmax_staged_forward"](x, z := torch.empty_like(x))
        assert torch.equal(y.view(torch.int16), z.view(torch.int16))
