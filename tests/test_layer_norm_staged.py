"""The staged forward of deep dive 22 (a Gluon kernel that copies a 16-bit row into shared memory).

Gluon kernels do not run in Triton's interpreter, so on a machine without a GPU these tests compile the
kernel for an H100 (sm_90a) with the installed Triton and check what the compiler made of it: the
shared memory each program takes, 16-byte asynchronous copies, and, where ptxas is bundled, registers
under the launcher's cap with nothing spilled. With a GPU they also run the kernel against float64.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, load_tutorial

ON_GPU = torch.cuda.is_available()
PAGE = ROOT / "tutorials" / "deep_dives" / "22_layer_norm_staged_gluon.py"
KERNEL = "layer_norm_fwd_staged_kernel"
POINTERS = ("x_ptr", "y_ptr", "w_ptr", "b_ptr", "mean_ptr", "rstd_ptr")

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
    page = load_tutorial("22_layer_norm_staged_gluon")
    cfg = page["_staged_config"](2)
    metas = [dict(page["staged_meta"](n_cols, 2, cfg, 65536), HAS_W=True, HAS_B=True) for n_cols in (32768, 20000)]
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
    """Only 16-bit rows of 16 K to 32 K are staged; the cap lets PER_SM programs share 65536 registers."""
    page = load_tutorial("22_layer_norm_staged_gluon")
    cfg = page["_staged_config"](2)
    assert page["_staged_config"](4) is None and cfg["MIN_N"] == 16385 and cfg["MAX_N"] == 32768
    meta = page["staged_meta"](32768, 2, cfg, 65536)
    assert meta["CHUNKS"] * cfg["CHUNK_N"] >= 32768 and meta["VEC"] == 8 and meta["EVEN"]
    assert meta["maxnreg"] * 32 * cfg["num_warps"] * cfg["PER_SM"] <= 65536
    assert not page["staged_meta"](20000, 2, cfg, 65536)["EVEN"]


@pytest.mark.skipif(ON_GPU, reason="checks the interpreter's fallback")
def test_no_staging_without_a_gpu():
    """Under the interpreter the launcher keeps the core kernel (and so the page still runs)."""
    page = load_tutorial("22_layer_norm_staged_gluon")
    x = torch.randn(2, 32768, dtype=torch.bfloat16)
    assert page["staged_plan"](x, {}) is None
    y, stats = torch.empty_like(x), torch.empty(2, 2)
    assert page["layer_norm_staged_forward"](x, y, None, None, *stats, 1e-5) == "fused (core)"
    ref = torch.nn.functional.layer_norm(x.double(), (32768,))
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
    page = load_tutorial("22_layer_norm_staged_gluon")
    torch.manual_seed(n_cols)
    x = (torch.randn(67, stride, device="cuda", dtype=dtype) * 3 + 1)[:, :n_cols]
    assert (page["staged_plan"](x, {}) is not None) == staged
    tol = 1.2e-2 if dtype == torch.bfloat16 else 2e-3
    x64 = x.double()
    for has_w, has_b in [(True, True), (False, True), (True, False)]:
        w = torch.randn(n_cols, device="cuda", dtype=dtype) if has_w else None
        b = torch.randn(n_cols, device="cuda", dtype=dtype) if has_b else None
        y = torch.full_like(x, float("nan"))
        mean = torch.full((x.shape[0],), float("nan"), device="cuda")
        rstd = torch.full_like(mean, float("nan"))
        ran = page["layer_norm_staged_forward"](x, y, w, b, mean, rstd, 1e-5)
        assert (ran == "staged (Gluon)") == staged
        ref = torch.nn.functional.layer_norm(
            x64, (n_cols,), None if w is None else w.double(), None if b is None else b.double(), eps=1e-5
        )
        assert rel_err(y, ref) < tol
        assert rel_err(mean, x64.mean(-1)) < 1e-6
        assert rel_err(rstd, 1 / torch.sqrt(x64.var(-1, unbiased=False) + 1e-5)) < 1e-5
