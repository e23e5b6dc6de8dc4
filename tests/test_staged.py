"""The staged forwards (Gluon kernels that copy a 16-bit row into shared memory) of tutorials 01 and 02.

Gluon kernels do not run in Triton's interpreter, so on a machine without a GPU these tests compile the
kernels for an H100 (sm_90a) with the installed Triton and check what the compiler made of them: the
shared memory each program takes, 16-byte asynchronous copies, and, where ptxas is bundled, registers
under the launcher's cap with nothing spilled. With a GPU they also run the kernels against float64.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, load_tutorial

ON_GPU = torch.cuda.is_available()
PAGES = {
    "01_fused_softmax": ("softmax_fwd_staged_kernel", "STAGED", ("x_ptr", "y_ptr")),
    "02_layer_norm": ("layer_norm_fwd_staged_kernel", "FWD_STAGED",
                      ("x_ptr", "y_ptr", "w_ptr", "b_ptr", "mean_ptr", "rstd_ptr")),
}

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


def compile_for_hopper(page, dtype, metas, tmp_path):
    kernel, _, pointers = PAGES[page]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", COMPILE, str(ROOT / "tutorials" / f"{page}.py"), kernel, json.dumps(pointers), dtype,
         json.dumps(metas), str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, f"compiling {kernel} for sm_90a failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("page", sorted(PAGES))
def test_staged_kernel_compiles_for_hopper(page, tmp_path):
    """The launcher's own meta-parameters (the page's staged_meta on its STAGED entry, for an H100's
    65536 registers per SM) for rows of 32768 (whole chunks) and 20000 columns (a masked last chunk)."""
    _, table, _ = PAGES[page]
    tutorial = load_tutorial(page)
    cfg = tutorial[table][2]  # the 16-bit entry
    metas = []
    for n_cols in (32768, 20000):
        meta = tutorial["staged_meta"](n_cols, 2, cfg, 65536)
        if page == "02_layer_norm":
            meta.update(HAS_W=True, HAS_B=True)
        metas.append(meta)
    for dtype in ("bf16", "fp16"):
        for result, meta in zip(compile_for_hopper(page, dtype, [dict(m) for m in metas], tmp_path), metas):
            staged_bytes = meta["CHUNKS"] * cfg["CHUNK_N"] * 2
            # the row in shared memory, plus a little scratch for the reductions
            assert staged_bytes <= result["shared"] <= staged_bytes + 1024, result
            # PER_SM programs' rows fit in an H100's 228 KB of shared memory per SM
            assert cfg["PER_SM"] * (result["shared"] + 1024) <= 233472, result
            assert result["copy_sizes"] == [16], f"expected 16-byte cp.async copies only: {result}"
            if "registers" in result:  # ptxas ran: the cap holds and nothing spills
                assert result["registers"] <= result["options"]["maxnreg"] and result["spill_bytes"] == 0, result


@pytest.mark.skipif(ON_GPU, reason="checks the interpreter's fallback")
def test_no_staging_without_a_gpu():
    """Under the interpreter the launchers keep the tl.* kernels (and so the pages still run)."""
    sm, ln = load_tutorial("01_fused_softmax"), load_tutorial("02_layer_norm")
    x = torch.randn(4, 32768, dtype=torch.bfloat16)
    assert sm["staged_plan"](x) is None
    assert ln["fwd_staged_plan"](x, {}) is None
    assert sm["forward_launch"](x, x)[0] is not sm["softmax_fwd_staged_kernel"]


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


@pytest.mark.skipif(not ON_GPU, reason="Gluon kernels need a CUDA GPU (Triton's interpreter does not run them)")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("n_cols,stride,staged", [(16400, 16400, True), (20000, 20000, True), (32768, 32768, True),
                                                  (32767, 32767, False), (32752, 32784, True), (16385, 16400, False)])
def test_staged_forwards_match_float64(dtype, n_cols, stride, staged):
    """Rows the staged kernels take (whole chunks or a masked last chunk, a row stride past the row) and
    rows they leave to the other kernels (length not a multiple of 16): outputs poisoned with NaN first."""
    sm, ln = load_tutorial("01_fused_softmax"), load_tutorial("02_layer_norm")
    torch.manual_seed(n_cols)
    x = (torch.randn(67, stride, device="cuda", dtype=dtype) * 3 + 1)[:, :n_cols]
    assert (sm["staged_plan"](x) is not None) == staged and (ln["fwd_staged_plan"](x, {}) is not None) == staged
    tol = 1.2e-2 if dtype == torch.bfloat16 else 2e-3
    y = torch.full_like(x, float("nan"))
    sm["softmax_rows_forward"](x, y)
    assert rel_err(y, torch.softmax(x.double(), -1)) < tol
    x64 = x.double()
    for has_w, has_b in [(True, True), (False, True), (True, False)]:
        w = torch.randn(n_cols, device="cuda", dtype=dtype) if has_w else None
        b = torch.randn(n_cols, device="cuda", dtype=dtype) if has_b else None
        y = torch.full_like(x, float("nan"))
        mean = torch.full((x.shape[0],), float("nan"), device="cuda")
        rstd = torch.full_like(mean, float("nan"))
        ln["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)
        ref = torch.nn.functional.layer_norm(x64, (n_cols,), None if w is None else w.double(),
                                             None if b is None else b.double(), eps=1e-5)
        assert rel_err(y, ref) < tol
        assert rel_err(mean, x64.mean(-1)) < 1e-6
        assert rel_err(rstd, 1 / torch.sqrt(x64.var(-1, unbiased=False) + 1e-5)) < 1e-5


@pytest.mark.skipif(not ON_GPU, reason="Gluon kernels need a CUDA GPU (Triton's interpreter does not run them)")
def test_staged_softmax_special_values_and_determinism():
    """NaN, +inf and -inf rows give what torch gives, and every run gives the same bits."""
    sm = load_tutorial("01_fused_softmax")
    x = torch.randn(8, 32768, device="cuda", dtype=torch.bfloat16)
    x[0] = -float("inf")
    x[1, 5] = float("nan")
    x[2, 7] = float("inf")
    x[3, :16384] = -float("inf")
    x[4, -1] = float("inf")
    assert sm["staged_plan"](x) is not None
    y = torch.empty_like(x)
    sm["softmax_rows_forward"](x, y)
    ref = torch.softmax(x.float(), -1)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    torch.testing.assert_close(torch.nan_to_num(y.float()), torch.nan_to_num(ref), atol=1e-2, rtol=1e-2)
    z = torch.empty_like(x)
    x = torch.randn(300, 32768, device="cuda", dtype=torch.bfloat16)
    sm["softmax_rows_forward"](x, y := torch.empty_like(x))
    for _ in range(3):
        sm["softmax_rows_forward"](x, z := torch.empty_like(x))
        assert torch.equal(y.view(torch.int16), z.view(torch.int16))
