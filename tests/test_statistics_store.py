"""The forward kernels of the norms store each row's statistics (layer norm: mean and rstd; RMSNorm: rstd)
without a trip through shared memory.

A row's statistic comes out of ``tl.sum`` held by every thread of that row. Stored as a 1-D tensor, or
through a pointer that is the same along the row, Triton re-lays it out along the rows first, through
shared memory, where every thread of a row writes the same word: compute-sanitizer's racecheck reports
those writes as write-write hazards (seen on an H100 at N = 7 with Triton 3.6). The pages store from the
tile's own layout instead, masked to column 0, through an address that moves along the row (layer norm: where
a warp holds several rows; a row over whole warps stores its statistics plainly, and racecheck found those clean).

Compiled here for an H100 (sm_90) with the installed Triton, no GPU needed:
- rows of 1 and 7 elements (a warp holds whole rows): no shared memory for the statistics' stores at all (RMSNorm's
  test for a row whose squares overflow fp32 reduces across the program's rows, and takes its own);
- wider rows: no more shared-memory stores than the same kernel with the statistics' stores cut out
  (what is left is the reductions' own exchange between warps), but for one in layer norm's on rows of 9 to 256: its
  mean adds each row's first value, loaded on its own rather than reduced out of the tile (a reduction fewer).
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, load_tutorial

KERNELS = {  # page -> (its fused forward kernel, the statistics' pointers, row lengths that store from the tile)
    "02_layer_norm": ("layer_norm_fwd_kernel", ("mean_ptr", "rstd_ptr"), (1, 7, 33, 100, 200)),
    "04_rms_norm": ("rms_norm_fwd_kernel", ("rstd_ptr",), (1, 7, 300, 1024, 4100)),
}

# In a fresh process: the test process may run under TRITON_INTERPRET=1, where tl.sum is an interpreter object.
COMPILE = r"""
import json, re, sys, os
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
path, name, cut, cases, tmp = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5]
src = open(path).read()
start = src.index("@triton.jit\ndef " + name)
body = src[start:min(e for e in (src.find("\n@triton.jit", start + 5), src.find("\n# %%", start)) if e > 0)]
for ptr in cut:  # the same kernel without the statistics' stores (every store of each, in any branch)
    while "tl.store(" + ptr in body:
        i = body.index("tl.store(" + ptr)
        depth, j = 0, i + len("tl.store")
        while True:
            depth += {"(": 1, ")": -1}.get(body[j], 0)
            j += 1
            if depth == 0:
                break
        body = body[:i] + "pass" + body[j:]
helpers = ""  # the page's other @triton.jit functions that the kernel calls (a row-statistics helper, say)
for match in re.finditer(r"^@triton\.jit\ndef (\w+)", src, re.M):
    if match.group(1) != name and re.search(r"\b" + match.group(1) + r"\(", body):
        end = min(e for e in (src.find("\n@triton.jit", match.start() + 5), src.find("\n# %%", match.start())) if e > 0)
        helpers += src[match.start():end] + "\n"
module_file = os.path.join(tmp, f"stats_{name}_{int(bool(cut))}.py")
open(module_file, "w").write("import triton\nimport triton.language as tl\n" + helpers + body)
sys.path.insert(0, tmp)
kernel = getattr(__import__(os.path.basename(module_file)[:-3]), name)
out = []
for case in cases:
    dtype, n, meta, num_warps = case["dtype"], case["n"], case["meta"], case["num_warps"]
    signature, attrs = {}, {}
    for i, arg in enumerate(kernel.arg_names):
        if arg in meta:
            signature[arg] = "constexpr"
        elif arg.endswith("_ptr"):
            signature[arg] = "*fp32" if arg in ("mean_ptr", "rstd_ptr") else "*" + dtype
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif arg == "eps":
            signature[arg] = "fp32"
        else:
            signature[arg] = "i32"
            if arg != "n_rows" and n % 16 == 0:  # n_cols and the row strides, as Triton specializes them
                attrs[(i,)] = [["tt.divisibility", 16]]
    constants = dict(meta)
    if n == 1:  # Triton specializes an integer argument equal to 1: the row strides of one-element rows
        for arg in kernel.arg_names:
            if arg.endswith("row_stride"):
                signature[arg], constants[arg] = "constexpr", 1
    compiled = triton.compile(ASTSource(kernel, signature, constants, attrs), target=GPUTarget("cuda", 90, 32),
                              options=dict(num_warps=num_warps))
    out.append(dict(shared=compiled.metadata.shared, st_shared=len(re.findall(r"\bst\.shared", compiled.asm["ptx"]))))
print(json.dumps(out))
"""


def _cases(page, stem):
    cases = []
    for dtype, element_size in (("fp32", 4), ("bf16", 2)):
        for n in KERNELS[stem][2]:
            if stem == "02_layer_norm":  # (meta, grid)
                kernel, (meta, _) = page["layer_norm_fwd_kernel"], page["_fwd_config"](4096, n, element_size)
            else:  # (kernel, meta, grid)
                kernel, meta, _ = page["_fwd_config"](4096, n, element_size)
            if kernel.__name__ != KERNELS[stem][0]:
                continue
            meta = dict(meta)
            num_warps = meta.pop("num_warps")
            meta.update({flag: True for flag in ("HAS_W", "HAS_B", "HAS_WEIGHT") if flag in kernel.arg_names})
            cases.append(dict(dtype=dtype, n=n, num_warps=num_warps, meta=meta))
    return cases


def _compile(stem, cases, cut, tmp_path):
    name, stats, _ = KERNELS[stem]
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            COMPILE,
            str(ROOT / "tutorials" / f"{stem}.py"),
            name,
            json.dumps(list(stats) if cut else []),
            json.dumps(cases),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
        timeout=600,
    )
    assert proc.returncode == 0, f"compiling {name} for sm_90 failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("stem", list(KERNELS))
def test_statistics_take_no_trip_through_shared_memory(stem, tmp_path):
    page = load_tutorial(stem)
    cases = _cases(page, stem)
    assert {c["n"] for c in cases} == set(KERNELS[stem][2]), "the fused forward should take these rows"
    kept, cut = _compile(stem, cases, False, tmp_path), _compile(stem, cases, True, tmp_path)
    for case, with_stores, without in zip(cases, kept, cut):
        where = f"{stem} {case['dtype']} N = {case['n']}"
        if case["n"] <= 8:  # a warp holds whole rows: the statistics' stores take no shared memory at all
            assert with_stores["shared"] == without["shared"], (
                f"{where}: the statistics' stores take {with_stores['shared'] - without['shared']} bytes of shared "
                "memory"
            )
        # layer norm's mean adds each row's first value, loaded on its own (not reduced out of the tile): on rows
        # of 9 to 256 that value reaches the tile's layout through one shared-memory store
        extra = 1 if stem == "02_layer_norm" and case["n"] > 8 else 0
        assert with_stores["st_shared"] <= without["st_shared"] + extra, (
            f"{where}: the statistics' stores add {with_stores['st_shared'] - without['st_shared']} st.shared"
        )
