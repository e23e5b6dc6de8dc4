"""Tests for the core reduction pages: tutorials/03_parallel_reduction.py (the row sums: the plain kernel, the tile,
their config, the read-only pass) and tutorials/03_sum_of_all_elements.py (the whole sum in one launch and
reduce_sum, which carries the row sums). reduce_sum against float64, the launchers on poisoned outputs, the read-only
pass, bitwise determinism, and the bad inputs. The split row kernel, the column kernel, the whole sum's other designs
and the running sums of deep dive 31: tests/test_reduction_rows_and_columns.py."""

import functools
import inspect
import operator
import random

import pytest
import torch

from conftest import DEVICE, load_tutorial

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# A few roundings of the output dtype (Triton's interpreter truncates fp32 -> bf16 instead of rounding).
TOLERANCE = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.fixture(scope="module")
def rows():
    """The row-sum page: steps 0 and 1."""
    return load_tutorial("03_parallel_reduction")


@pytest.fixture(scope="module")
def tut():
    """The whole sum's page: step 2 and the drop-in reduce_sum."""
    return load_tutorial("03_sum_of_all_elements")


def _rel_error(out, ref):
    ref = ref.double()
    scale = ref.norm().item()
    return (out.double() - ref).norm().item() / (scale if scale > 0 else 1.0)


def _sum_error(out, x, dim=None):
    """The error of a sum against float64, relative to the sum of |x|: a rounding error of each term
    bounds it, however much the terms cancel (a relative error of the sum itself need not stay small)."""
    x64 = x.double()
    ref, size = (x64.sum(), x64.abs().sum()) if dim is None else (x64.sum(dim), x64.abs().sum(dim))
    return (out.double() - ref).norm().item() / max(size.norm().item(), 1e-30)


def _input(shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen) + 0.05).to(dtype).to(DEVICE)  # sums stay in fp16 range


# sizes: 1, primes, powers of two, and ones that need several programs and a second pass
VECTOR_SIZES = [1, 2, 3, 31, 127, 1024, 4099, 65536, 100_003]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", VECTOR_SIZES)
def test_sum_all_matches_float64(tut, n, dtype):
    x = _input((n,), dtype, seed=n)
    out = tut["reduce_sum"](x)
    assert out.shape == () and out.dtype == dtype, f"expected a 0-d {dtype} tensor, got {out.shape} {out.dtype}"
    err = _sum_error(out, x)
    assert err <= TOLERANCE[dtype], f"n={n} {dtype}: error relative to sum |x| {err:.2e} > {TOLERANCE[dtype]:.0e}"


def _random_matrix_shapes(count, seed):
    rng = random.Random(seed)
    sizes = [1, 2, 3, 7, 16, 31, 64, 127, 257, 1000, 2053]
    shapes = [(rng.choice(sizes), rng.choice(sizes)) for _ in range(count)]
    return [s for s in shapes if s[0] * s[1] <= 300_000] + [(1, 1), (1, 5003), (5003, 1), (3, 40_009), (40_009, 3)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", _random_matrix_shapes(8, seed=3))
@pytest.mark.parametrize("dim", [None, 0, 1, -1, -2])
def test_matrix_sums_match_float64(tut, shape, dim, dtype):
    x = _input(shape, dtype, seed=shape[0] * 7919 + shape[1])
    out = tut["reduce_sum"](x, dim)
    ref = x.double().sum() if dim is None else x.double().sum(dim)
    assert out.shape == ref.shape and out.dtype == dtype, f"got {out.shape} {out.dtype}, expected {ref.shape}"
    err = _sum_error(out, x, dim)
    assert err <= TOLERANCE[dtype], f"{shape} dim={dim} {dtype}: error relative to sum |x| {err:.2e}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [None, 0, 1])
def test_non_contiguous_inputs(tut, dim, dtype):
    base = _input((130, 90), dtype, seed=11)
    for x in (base.t(), base[::3, 1::2], base[:, :45]):
        assert not x.is_contiguous()
        out = tut["reduce_sum"](x, dim)
        ref = x.double().sum() if dim is None else x.double().sum(dim)
        assert out.shape == ref.shape
        err = _rel_error(out, ref)
        assert err <= TOLERANCE[dtype], f"strides {x.stride()} dim={dim} {dtype}: relative error {err:.2e}"


# every form of torch.sum's dim: None, (), [], an int, negative, a tuple or list of several, in any order
DIMS = [None, (), [], 0, 1, 2, -1, (1,), [2], (0, 2), (2, 0), [-1, 0], (0, 1), (1, 2), (-3, -2, -1), (0, 1, 2)]


def _torch_sum(x, dim, keepdim=False, **kw):
    return torch.sum(x, dim=dim, keepdim=keepdim, **kw)  # dim=None: every element, keepdim honoured


@pytest.mark.parametrize(
    "shape,dim",
    [((4, 9, 17), d) for d in DIMS]
    + [((2, 3, 4, 5), d) for d in (None, (1, 3), (0, 2, 3), (-1, 1), 2)]
    + [((3, 1, 70), 1), ((3, 1, 70), (0, 1)), ((), None), ((), 0), ((), -1), ((), (0,)), ((), ()), ((), [-1])],
)
@pytest.mark.parametrize("keepdim", [False, True])
def test_every_dim_form_and_keepdim_like_torch(tut, shape, dim, keepdim):
    x = _input(shape, torch.float32, seed=5)
    out = tut["reduce_sum"](x, dim, keepdim)
    ref = _torch_sum(x.double(), dim, keepdim)
    assert out.shape == ref.shape, f"{shape} dim={dim} keepdim={keepdim}: {out.shape} != torch's {ref.shape}"
    assert out.dtype == x.dtype
    assert _rel_error(out, ref) <= 1e-6, f"{shape} dim={dim}: relative error {_rel_error(out, ref):.2e}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,dim",
    [
        ((6, 33, 65), (0, 2)),
        ((6, 33, 65), (2, 1)),
        ((5, 7, 3, 11), (0, 2)),
        ((5, 7, 3, 11), (1, 3)),
        ((5, 7, 3, 11), (0, 1, 3)),
        ((257, 3, 5), (-1, -2)),
    ],
)
def test_several_dims_match_float64(tut, shape, dim, dtype):
    x = _input(shape, dtype, seed=sum(shape))
    out = tut["reduce_sum"](x, dim)
    ref = x.double().sum(dim)
    assert out.shape == ref.shape and out.dtype == dtype, f"got {out.shape} {out.dtype}, expected {ref.shape}"
    err = _rel_error(out, ref)
    assert err <= TOLERANCE[dtype], f"{shape} dim={dim} {dtype}: relative error {err:.2e}"


def _strided_inputs(dtype):
    """Non-contiguous 3-D views (transposed, sliced, permuted) and expanded ones (stride 0)."""
    base = _input((12, 10, 14), dtype, seed=21)
    row = _input((1, 10, 1), dtype, seed=22)
    return {
        "transposed": base.transpose(0, 2),
        "sliced": base[::2, 1:, ::3],
        "permuted": base.permute(1, 2, 0),
        "expanded": row.expand(6, 10, 9),
        "expanded, one dim": _input((7, 1), dtype, seed=23).expand(7, 5)[None],
        "expanded and transposed": row.expand(6, 10, 9).transpose(1, 2),
    }


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [None, 0, 1, -1, (0, 2), (1, 2), (0, 1, 2)])
@pytest.mark.parametrize(
    "kind", ["transposed", "sliced", "permuted", "expanded", "expanded, one dim", "expanded and transposed"]
)
def test_non_contiguous_and_expanded_several_dims(tut, dtype, dim, kind):
    x = _strided_inputs(dtype)[kind]
    assert not x.is_contiguous()
    out = tut["reduce_sum"](x, dim)
    ref = _torch_sum(x.double(), dim)
    assert out.shape == ref.shape, f"{kind} dim={dim}: {out.shape} != {ref.shape}"
    err = _rel_error(out, ref)
    assert err <= TOLERANCE[dtype], f"{kind} strides {x.stride()} dim={dim} {dtype}: relative error {err:.2e}"


@pytest.mark.parametrize("x_dtype", DTYPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [None, 1, (0, 2)])
def test_dtype_keyword_like_torch(tut, x_dtype, dtype, dim):
    """dtype=: torch casts x to dtype first, then sums; the result is in dtype."""
    x = _input((5, 40, 3), x_dtype, seed=31)
    out = tut["reduce_sum"](x, dim, dtype=dtype)
    ref = _torch_sum(x, dim, dtype=dtype)
    assert out.shape == ref.shape and out.dtype == ref.dtype == dtype, (
        f"{out.shape} {out.dtype} vs {ref.shape} {ref.dtype}"
    )
    exact = _torch_sum(x.to(dtype).double(), dim)
    err = _rel_error(out, exact)
    assert err <= TOLERANCE[dtype], f"{x_dtype} -> {dtype} dim={dim}: relative error {err:.2e}"


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.int64, torch.bool, torch.complex64])
def test_dtypes_the_kernels_lack_raise_a_clear_type_error(tut, dtype):
    """Never a wrong answer: a float64 (or integer, bool) sum would need wider running sums than fp32."""
    x = torch.ones(4, 5, device=DEVICE)
    with pytest.raises(TypeError, match="float32, float16 and bfloat16"):
        tut["reduce_sum"](x, dtype=dtype)
    with pytest.raises(TypeError, match="float32, float16 and bfloat16"):
        tut["reduce_sum"](x.to(dtype), 1)
    with pytest.raises(TypeError, match="float32, float16 and bfloat16"):
        tut["reduce_sum"](x, 1, dtype=dtype)


@pytest.mark.parametrize(
    "shape,dim",
    [
        ((0,), None),
        ((0, 5), None),
        ((0, 5), 0),
        ((0, 5), 1),
        ((5, 0), 0),
        ((5, 0), 1),
        ((2, 0, 3), 1),
        ((2, 0, 3), (0, 2)),
        ((2, 0, 3), (1, 2)),
        ((2, 0, 3), ()),
        ((0, 4, 0), (0, 2)),
        ((3, 0), [-1, 0]),
    ],
)
@pytest.mark.parametrize("keepdim", [False, True])
def test_empty_inputs_like_torch(tut, shape, dim, keepdim):
    x = torch.empty(shape, device=DEVICE)
    out = tut["reduce_sum"](x, dim, keepdim)
    ref = _torch_sum(x, dim, keepdim)
    assert out.shape == ref.shape and torch.equal(out, ref), f"{shape} dim={dim}: {out} != {ref}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward(tut, dtype):
    x = _input((33, 65), dtype, seed=2).requires_grad_(True)
    for dim, keepdim in [
        (None, False),
        (None, True),
        (0, False),
        (1, True),
        (-1, False),
        ((0, 1), False),
        ((1, 0), True),
        ((), False),
    ]:
        out = tut["reduce_sum"](x, dim, keepdim)
        grad_out = _input(out.shape, dtype, seed=4)
        (dx,) = torch.autograd.grad(out, x, grad_out)
        (dx_ref,) = torch.autograd.grad(_torch_sum(x, dim, keepdim), x, grad_out)
        assert dx.shape == x.shape and dx.dtype == x.dtype and torch.equal(dx, dx_ref), (
            f"dim={dim} keepdim={keepdim}: gradient differs from torch's"
        )


@pytest.mark.parametrize(
    "shape,dim",
    [
        ((4, 9, 17), (0, 2)),
        ((4, 9, 17), (2, 1)),
        ((2, 3, 4, 5), (0, 2, 3)),
        ((2, 3, 4, 5), 1),
        ((), None),
        ((), 0),
        ((), (0,)),
        ((0, 3), 1),
        ((3, 0, 2), (0, 1)),
    ],
)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", [None, torch.float32, torch.bfloat16])
def test_backward_several_dims_and_dtype_like_torch(tut, shape, dim, keepdim, dtype):
    """The gradient of a sum is the upstream gradient broadcast over the reduced dims, in x's dtype, also
    through dtype= (a cast) and for non-contiguous and expanded inputs."""
    base = _input(shape, torch.float16, seed=8)
    for x in (base, base.transpose(0, -1) if base.dim() > 1 else base):
        x = x.detach().requires_grad_(True)
        out = tut["reduce_sum"](x, dim, keepdim, dtype=dtype)
        ref = _torch_sum(x, dim, keepdim, dtype=dtype)
        assert out.shape == ref.shape and out.dtype == ref.dtype, f"{out.shape} {out.dtype} vs {ref.shape} {ref.dtype}"
        grad_out = _input(out.shape, out.dtype, seed=9)
        (dx,) = torch.autograd.grad(out, x, grad_out)
        (dx_ref,) = torch.autograd.grad(ref, x, grad_out)
        assert dx.shape == x.shape and dx.dtype == x.dtype and torch.equal(dx, dx_ref), (
            f"{shape} dim={dim} keepdim={keepdim} dtype={dtype}: gradient differs from torch's"
        )


def test_backward_of_an_expanded_input(tut):
    leaf = _input((3, 1, 5), torch.float32, seed=12).requires_grad_(True)
    grads = []
    for fn in (tut["reduce_sum"], torch.sum):
        (g,) = torch.autograd.grad(fn(leaf.expand(3, 4, 5), (0, 1)), leaf, torch.arange(5.0, device=DEVICE))
        grads.append(g)
    assert torch.equal(*grads), f"{grads[0]} != torch's {grads[1]}"


# --- the low-level launchers write every element of a poisoned output ---


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 1000, 8191, 70_001])
def test_sum_vector_writes_the_sum(tut, dtype, n):
    """Step 2's launcher (the drop-in's whole sum), one pass and two, on a poisoned output."""
    x = _input((n,), dtype, seed=n + 1)
    out = torch.full((1,), float("nan"), device=DEVICE, dtype=dtype)
    tut["sum_vector"](x, out)
    assert not out.isnan().any(), "output left unwritten"
    err = _rel_error(out[0], x.double().sum())
    assert err <= TOLERANCE[dtype], f"n={n} {dtype}: relative error {err:.2e}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape", [(1, 1), (5, 3), (300, 17), (17, 300), (2, 9000), (9000, 2), (257, 129), (40_009, 3), (3, 40_009)]
)
@pytest.mark.parametrize("transposed", [False, True])
def test_row_kernel_writes_every_output(rows, dtype, shape, transposed):
    """The core row kernel, one program per BLOCK_M rows and one split covering each row, on a poisoned
    output; transposed, it is the core page's column sum (strided rows)."""
    x = _input(shape, dtype, seed=sum(shape))
    if transposed:
        x = x.t()
    out = torch.full((x.shape[0],), float("nan"), device=DEVICE, dtype=dtype)
    rows["sum_rows"](x, out)
    assert not out.isnan().any(), f"{tuple(x.shape)}: {int(out.isnan().sum())} outputs unwritten"
    err = _rel_error(out, x.double().sum(1))
    assert err <= TOLERANCE[dtype], f"{tuple(x.shape)} strides {x.stride()}: relative error {err:.2e}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (300, 17), (17, 300), (3, 5003), (2, 16384)])
@pytest.mark.parametrize("transposed", [False, True])
def test_plain_kernel_writes_every_row_sum(rows, dtype, shape, transposed):
    """The ladder's step 0: one program a row, the whole row in one block, on a poisoned output."""
    x = _input(shape[::-1] if transposed else shape, dtype, seed=sum(shape) + 7)
    x = x.t() if transposed else x
    out = torch.full((x.shape[0],), float("nan"), device=DEVICE, dtype=dtype)
    rows["plain_sum_rows"](x, out)
    assert not out.isnan().any(), f"{tuple(x.shape)}: {int(out.isnan().sum())} outputs unwritten"
    err = _rel_error(out, x.double().sum(1))
    assert err <= TOLERANCE[dtype], f"{tuple(x.shape)} strides {x.stride()}: relative error {err:.2e}"


def test_plain_kernel_refuses_rows_longer_than_its_block(rows):
    with pytest.raises(ValueError, match="at most 16384"):
        rows["plain_sum_rows"](torch.zeros(1, 16385, device=DEVICE), torch.empty(1, device=DEVICE))


def test_ladder_table_measures_each_step(rows):
    """The row-sum page's ladder: steps 0 and 1 with the columns the site expects, each at rows of 64 and 4096, every
    figure measured (positive and finite)."""
    ladder = rows["ladder"]
    assert list(ladder.columns) == ["step", "idea", "N", "GB/s", "% of light"], list(ladder.columns)
    assert sorted(set(ladder.step)) == [0, 1], ladder
    assert set(ladder[ladder.step == 0].N) == set(ladder[ladder.step == 1].N) == {64, 4096}, ladder
    assert (ladder["GB/s"] > 0).all() and (ladder["% of light"] > 0).all() and ladder["GB/s"].notna().all(), ladder


def test_steps_table_measures_step_2_against_step_1(tut):
    """The whole sum's page: step 1 (carried) and step 2 on one row of every element, every figure measured."""
    steps = tut["steps"]
    assert list(steps.columns) == ["step", "idea", "N", "GB/s", "% of light"], list(steps.columns)
    assert list(steps.step) == [1, 2] and set(steps.N) == {tut["LADDER_ELEMENTS"]}, steps
    assert (steps["GB/s"] > 0).all() and (steps["% of light"] > 0).all() and steps["GB/s"].notna().all(), steps


def test_the_drop_ins_page_carries_the_row_sums_letter_for_letter(rows, tut):
    """03_sum_of_all_elements runs the row sums that 03_parallel_reduction teaches: the same kernel, config and
    launcher."""
    assert inspect.getsource(tut["row_sum_kernel"].fn) == inspect.getsource(rows["row_sum_kernel"].fn)
    for name in ("_row_config", "sum_rows"):
        assert inspect.getsource(tut[name]) == inspect.getsource(rows[name]), name


def test_both_pages_measure_the_same_speed_of_light(rows, tut):
    """The read-only pass (the speed of light) and its configurations are the same on both pages."""
    assert inspect.getsource(tut["read_kernel"].fn) == inspect.getsource(rows["read_kernel"].fn)
    assert inspect.getsource(tut["read_pass"]) == inspect.getsource(rows["read_pass"])
    assert tut["READ_CONFIGS"] == rows["READ_CONFIGS"]


def test_persistent_last_program_adds_the_partials(tut):
    """The vector sizes above reach a grid of several programs (the last one's adding is tested), and every launch
    leaves its ticket counter at 0: called again, it sums again, to the same bits."""
    x = _input((100_003,), torch.float32, seed=3)
    first, out = torch.empty(1, device=DEVICE), torch.empty(1, device=DEVICE)
    assert tut["sum_vector"](x, first) > 1
    for _ in range(3):
        out.fill_(float("nan"))
        tut["sum_vector"](x, out)
        assert torch.equal(out.view(torch.int32), first.view(torch.int32)), (out, first)
    assert all(int(t.item()) == 0 for t in tut["_TICKETS"].values())


@pytest.mark.parametrize(
    "n_rows,n_cols", [(1, 1), (1, 5003), (5003, 1), (3, 40_009), (40_009, 3), (256, 16), (64, 4096), (2, 2**20)]
)
def test_row_config_is_a_tile_of_8192_elements(rows, n_rows, n_cols):
    """_row_config: BLOCK_N the row rounded up to a power of two, at most 8192; BLOCK_M fills a tile of 8192
    elements (no more rows than the matrix has); 16 elements per thread, 4 to 16 warps."""
    block_m, block_n, num_warps = rows["_row_config"](n_rows, n_cols)
    assert block_n == min(8192, 1 << (n_cols - 1).bit_length()), (n_rows, n_cols, block_n)
    assert block_m == max(1, min(8192 // block_n, 1 << (n_rows - 1).bit_length())), (n_rows, n_cols, block_m)
    assert num_warps == min(16, max(4, block_m * block_n // 512)), (n_rows, n_cols, num_warps)


@pytest.mark.parametrize("shape", [(64, 64), (63, 64), (64, 63), (8, 4096), (3, 5000)])
def test_row_sums_with_and_without_masks_agree(rows, shape):
    """EVEN (no masks) is chosen only where every tile is full, and gives the masked kernel's bits there."""
    x = _input(shape, torch.bfloat16, seed=sum(shape))
    out, ref = (torch.full((shape[0],), float("nan"), device=DEVICE, dtype=x.dtype) for _ in range(2))
    rows["sum_rows"](x, out)
    block_m, block_n, num_warps = rows["_row_config"](*shape)
    rows["row_sum_kernel"][(-(-shape[0] // block_m),)](
        x, ref, *shape, *x.stride(), BLOCK_M=block_m, BLOCK_N=block_n, EVEN=False, num_warps=num_warps
    )
    assert torch.equal(out, ref), shape
    assert _rel_error(out, x.double().sum(1)) <= TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("warps_per_sm, per_sm", [(64, 4), (48, 3)])  # sm_80, sm_90; sm_86, sm_89
@pytest.mark.parametrize("n", [1, 4096, 4097, 2**20, 2**28])
def test_vector_config_is_a_persistent_grid_of_16_warp_programs(tut, n, warps_per_sm, per_sm, monkeypatch):
    """_vector_config: 4096 elements a program a step, 16 warps, one program a block up to as many programs an SM as
    its warp slots hold (4 on sm_80 and sm_90, 3 on sm_86 and sm_89); loads marked evict_first up to 4 times the L2's
    bytes, unmarked past."""
    monkeypatch.setitem(tut.data, "WARPS_PER_SM", warps_per_sm)
    for element_size in (2, 4):
        grid, meta = tut["_vector_config"](n, element_size)
        assert grid == min(-(-n // 4096), per_sm * tut["NUM_SMS"]), n
        evict = "evict_first" if n * element_size <= 4 * tut["L2_BYTES"] else ""
        assert meta == dict(BLOCK=4096, EVICT=evict, num_warps=16), (n, element_size)
    assert tut["_vector_config"](2**28, 2)[1]["EVICT"] == "" and tut["_vector_config"](2**20, 4)[1]["EVICT"]


# --- the read-only pass (the page's speed of light) reads every byte ---


def _xor_all(words):
    return functools.reduce(operator.xor, words.reshape(-1).tolist(), 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [2, 1000, 4098, 65_538, 100_002])  # whole 32-bit words in bf16 too
def test_read_pass_reads_every_word(rows, dtype, n):
    """The xor of the words the read-only pass stores equals the xor of all the tensor's 32-bit words: a word
    skipped (or read twice) changes it. The page's grids, and small blocks so that many programs (and the
    persistent grid's loop) take part: up to 4098 elements (17 blocks of 256 words, 4 persistent programs on the
    CPU), where they cost the interpreter seconds, not minutes."""
    x = _input((n,), dtype, seed=n + 3)
    words = x.view(torch.int32)
    small = [dict(block=256, num_warps=4), dict(block=256, num_warps=4, programs_per_sm=1)]
    small *= DEVICE == "cuda" or n <= 4098  # many programs: slow in the interpreter
    for config in [*rows["READ_CONFIGS"], *small]:
        out = rows["read_pass"](x, **config)
        assert out.dtype == torch.int32 and out.numel() >= 1
        assert _xor_all(out) == _xor_all(words), f"n={n} {dtype} {config}: the xor of the words read differs"


def test_read_pass_refuses_what_it_cannot_read_as_words(rows):
    with pytest.raises(ValueError, match="contiguous"):
        rows["read_pass"](torch.zeros(4, 6, device=DEVICE)[:, :4])
    with pytest.raises(ValueError, match="32-bit words"):
        rows["read_pass"](torch.zeros(3, device=DEVICE, dtype=torch.bfloat16))


# --- determinism ---


@pytest.mark.parametrize("case", ["sum_vector", "reduce_sum", "reduce_sum dim=0", "rows"])
def test_deterministic_designs_give_identical_bits(rows, tut, case):
    x = _input((70_001,), torch.float32, seed=9)
    xm = x[:70_000].view(700, 100)
    out = torch.empty(1, device=DEVICE)
    col_out = torch.empty(100, device=DEVICE)
    run = {
        "sum_vector": lambda: (tut["sum_vector"](x, out), out.clone())[1],
        "reduce_sum": lambda: tut["reduce_sum"](x),
        "reduce_sum dim=0": lambda: tut["reduce_sum"](xm, 0),
        "rows": lambda: (rows["sum_rows"](xm.t(), col_out), col_out.clone())[1],
    }[case]
    first = run()
    for _ in range(4):
        again = run()
        assert torch.equal(again.view(torch.int32), first.view(torch.int32)), f"{case}: {again} != {first}"


# --- bad inputs ---


def test_bad_inputs_raise_clear_errors(tut):
    reduce_sum = tut["reduce_sum"]
    x = torch.ones(4, 5, device=DEVICE)
    with pytest.raises(TypeError, match="float32, float16 and bfloat16"):
        reduce_sum(torch.ones(4, dtype=torch.int32, device=DEVICE))
    with pytest.raises(TypeError, match="float32, float16 and bfloat16"):
        reduce_sum(torch.ones(4, dtype=torch.float64, device=DEVICE))
    with pytest.raises(TypeError, match="torch.Tensor"):
        reduce_sum([1.0, 2.0])
    for dim in (2, -3, (0, 2), [-3], (1, 5)):  # IndexError, as torch.sum raises
        with pytest.raises(IndexError, match="out of range"):
            torch.sum(x, dim)
        with pytest.raises(IndexError, match="out of range"):
            reduce_sum(x, dim)
    for dim in ((0, 0), (1, -1), [0, 1, 0]):  # RuntimeError, as torch.sum raises
        with pytest.raises(RuntimeError, match="appears multiple times"):
            torch.sum(x, dim)
        with pytest.raises(RuntimeError, match="appears more than once"):
            reduce_sum(x, dim)
    with pytest.raises(RuntimeError, match="appears more than once"):
        reduce_sum(torch.tensor(1.0, device=DEVICE), (0, -1))  # a 0-d tensor too, as torch
    for dim in (0.5, True, (0, 1.5), "0"):  # TypeError, as torch.sum raises
        with pytest.raises((TypeError, RuntimeError)):  # a str: a dimension name to some torch builds
            torch.sum(x, dim)
        with pytest.raises(TypeError, match="None, an int or a tuple or list of ints"):
            reduce_sum(x, dim)
    assert torch.equal(reduce_sum(x, (1,)), torch.sum(x, 1))  # a 1-tuple is one dim, as in torch
    with pytest.raises(TypeError):
        reduce_sum(x, 0, False, torch.float32)  # dtype is keyword-only, as in torch.sum
    if DEVICE == "cuda":
        with pytest.raises(ValueError, match="CUDA GPU is in use"):
            reduce_sum(torch.ones(4))
    else:
        with pytest.raises(ValueError, match="interpreter"):
            reduce_sum(torch.ones(4, device="meta"))


@pytest.mark.parametrize("dims", ([0, 1], [1], [0], [0, 2]), ids=str)
@pytest.mark.parametrize("requires_grad", (False, True))
def test_operator_passes_opcheck(tut, dims, requires_grad):
    """reduce_sum's operator (torch.library.custom_op): schema, fake tensor, autograd registration, and the same
    values and gradients under AOTAutograd as eagerly."""
    x = _input((5, 7, 3) if 2 in dims else (5, 7), torch.float32, seed=len(dims)).requires_grad_(requires_grad)
    torch.library.opcheck(tut["sum_op"], (x, dims, torch.float32))


@pytest.mark.parametrize("dim", (None, 0, (0, 1)), ids=str)
def test_compiled_block_matches_eager(tut, dim):
    """A linear layer, reduce_sum, a loss, compiled with fullgraph=True (AOTAutograd, no Inductor on the CPU): no
    graph break, the same values and gradients as eagerly."""
    linear = torch.nn.Linear(16, 12, device=DEVICE)
    x = _input((6, 16), torch.float32, seed=1)

    def block(t):
        out = tut["reduce_sum"](linear(t)) if dim is None else tut["reduce_sum"](linear(t), dim)
        return out.square().sum()

    def run(fn):
        linear.zero_grad(set_to_none=True)
        t = x.clone().requires_grad_()
        loss = fn(t)
        loss.backward()
        return loss.detach(), t.grad, linear.weight.grad

    torch._dynamo.reset()
    for got, want in zip(run(torch.compile(block, fullgraph=True, backend="aot_eager")), run(block)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_the_reading_measures_the_fixed_cost_of_a_short_sum(tut, monkeypatch):
    """At the smallest n the reading sets ours beside a launch that reads nothing, timed in the same run; the figures
    are the table's (a GPU's table, made up here) and fixed_cost's, which times the kernel on one empty program."""
    import pandas as pd

    assert tut["fixed_cost"]() >= 0  # the launch runs (through the interpreter on a CPU)
    first, last = tut["SWEEP_VECTOR"][0], tut["SWEEP_VECTOR"][-1]
    index = pd.MultiIndex.from_tuples(
        [("sum of all elements", t, n) for t in ("float32", "bfloat16") for n in (first, last)],
        names=["direction", "dtype", "N"],
    )
    ours = first * 4e-3 / 8.0  # 8 us for the fp32 sum at the smallest n
    table = pd.DataFrame(
        {"speed of light": 2 * ours, "torch": ours / 2, "torch.compile": ours, "ours": ours}, index=index
    )
    table["ours, % of light"], table["ours / best peer"] = 50.0, 1.0
    steps = pd.DataFrame({"step": [1, 2], "GB/s": [1.0, 2.0]})
    monkeypatch.setitem(tut["reading"].__globals__, "ON_GPU", True)
    text = tut["reading"](table.style, steps, 0.006)  # 6 us, in ms
    assert f"At n = {first:,} a whole fp32 sum takes 8 us" in text, text
    assert "which itself takes 4 us" in text and "reads nothing took 6 us in this run, 75% of ours" in text, text
