"""Tests for tutorials/03_parallel_reduction.py: reduce_sum against float64, the low-level launchers on
poisoned outputs, bitwise determinism of the designs that promise it, and the bad inputs."""

import functools
import operator
import random

import pytest
import torch

from conftest import DEVICE, load_tutorial

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# A few roundings of the output dtype (Triton's interpreter truncates fp32 -> bf16 instead of rounding).
TOLERANCE = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.fixture(scope="module")
def tut():
    return load_tutorial("03_parallel_reduction")


def _rel_error(out, ref):
    ref = ref.double()
    scale = ref.norm().item()
    return (out.double() - ref).norm().item() / (scale if scale > 0 else 1.0)


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
    err = _rel_error(out, x.double().sum())
    assert err <= TOLERANCE[dtype], f"n={n} {dtype}: relative error {err:.2e} > {TOLERANCE[dtype]:.0e}"


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
    err = _rel_error(out, ref)
    assert err <= TOLERANCE[dtype], f"{shape} dim={dim} {dtype}: relative error {err:.2e}"


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


@pytest.mark.parametrize("shape,dim", [((4, 9, 17), 0), ((4, 9, 17), 1), ((4, 9, 17), 2), ((4, 9, 17), -1),
                                       ((2, 3, 4, 5), None), ((3, 1, 70), 1), ((), None), ((), 0), ((), -1)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_more_dims_and_keepdim_like_torch(tut, shape, dim, keepdim):
    x = _input(shape, torch.float32, seed=5)
    if dim is None and keepdim:
        pytest.skip("torch.sum has no keepdim without a dim")
    out = tut["reduce_sum"](x, dim, keepdim) if dim is not None else tut["reduce_sum"](x)
    ref = torch.sum(x.double(), dim, keepdim) if dim is not None else x.double().sum()
    assert out.shape == ref.shape, f"{shape} dim={dim} keepdim={keepdim}: {out.shape} != {ref.shape}"
    assert _rel_error(out, ref) <= 1e-6


@pytest.mark.parametrize("shape,dim", [((0,), None), ((0, 5), None), ((0, 5), 0), ((0, 5), 1), ((5, 0), 0),
                                       ((5, 0), 1), ((2, 0, 3), 1)])
def test_empty_inputs_like_torch(tut, shape, dim):
    x = torch.empty(shape, device=DEVICE)
    out = tut["reduce_sum"](x, dim)
    ref = torch.sum(x) if dim is None else torch.sum(x, dim)
    assert out.shape == ref.shape and torch.equal(out, ref), f"{shape} dim={dim}: {out} != {ref}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward(tut, dtype):
    x = _input((33, 65), dtype, seed=2).requires_grad_(True)
    for dim, keepdim in [(None, False), (0, False), (1, True), (-1, False)]:
        out = tut["reduce_sum"](x, dim, keepdim) if dim is not None else tut["reduce_sum"](x)
        grad_out = _input(out.shape, dtype, seed=4)
        (dx,) = torch.autograd.grad(out, x, grad_out)
        ref = torch.sum(x, dim, keepdim) if dim is not None else torch.sum(x)
        (dx_ref,) = torch.autograd.grad(ref, x, grad_out)
        assert dx.shape == x.shape and torch.equal(dx, dx_ref), f"dim={dim}: gradient differs from torch's"


# --- the low-level launchers write every element of a poisoned output ---

@pytest.mark.parametrize("design", ["atomic", "two-pass", "persistent"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 1000, 8191, 70_001])
def test_sum_vector_designs(tut, design, dtype, n):
    x = _input((n,), dtype, seed=n + 1)
    out_dtype = torch.float32 if design == "atomic" else dtype
    out = torch.full((1,), float("nan"), device=DEVICE, dtype=out_dtype)
    tut["sum_vector"](x, out, design)
    assert not out.isnan().any(), f"{design}: output left unwritten"
    err = _rel_error(out[0], x.double().sum())
    assert err <= TOLERANCE[out_dtype], f"{design} n={n} {dtype}: relative error {err:.2e}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (300, 17), (17, 300), (2, 9000), (9000, 2), (257, 129),
                                   (40_009, 3), (3, 40_009)])  # the last two need SPLIT > 1
@pytest.mark.parametrize("along", ["rows", "cols"])
@pytest.mark.parametrize("transposed", [False, True])
def test_row_and_col_kernels_write_every_output(tut, dtype, shape, along, transposed):
    x = _input(shape, dtype, seed=sum(shape))
    if transposed:
        x = x.t()
    dim = 1 if along == "rows" else 0
    out = torch.full((x.shape[1 - dim],), float("nan"), device=DEVICE, dtype=dtype)
    config = (tut["sum_rows"] if along == "rows" else tut["sum_cols"])(x, out)
    assert not out.isnan().any(), f"{along} {tuple(x.shape)} {config}: {int(out.isnan().sum())} outputs unwritten"
    err = _rel_error(out, x.double().sum(dim))
    assert err <= TOLERANCE[dtype], f"{along} {tuple(x.shape)} {config}: relative error {err:.2e}"


def test_split_and_second_pass_are_exercised(tut):
    """The shapes above must reach the split path (SPLIT > 1), or its second pass goes untested."""
    x = torch.zeros((40_009, 3), device=DEVICE)
    assert tut["sum_cols"](x, torch.empty(3, device=DEVICE))["SPLIT"] > 1
    x = torch.zeros((3, 40_009), device=DEVICE)
    assert tut["sum_rows"](x, torch.empty(3, device=DEVICE))["SPLIT"] > 1
    x = torch.zeros(100_003, device=DEVICE)
    assert tut["sum_vector"](x, torch.empty(1, device=DEVICE), "persistent") > 1


@pytest.mark.parametrize("n_programs", [1, 3, 7, 10, 16, 17, 33, 1000])
@pytest.mark.parametrize("reduced_len", [1, 63, 64, 1000, 40_009])
def test_split_never_overfills_the_gpu(tut, n_programs, reduced_len):
    """The split is rounded down: at most WAVES programs per SM (unless one piece each is already more), every
    piece a multiple of the step, together covering the reduced axis exactly once."""
    step = 64
    split, per_split = tut["choose_split"](n_programs, reduced_len, step)
    room = tut["WAVES"] * tut["NUM_SMS"]
    assert split >= 1 and per_split % step == 0
    assert n_programs * split <= max(room, n_programs), f"{n_programs} x {split} programs for {room} slots"
    assert (split - 1) * per_split < reduced_len <= split * per_split, f"{split} pieces of {per_split}"
    # the row kernel's rounding: at least WAVES programs per SM where the pieces allow it
    up, per_up = tut["choose_split"](n_programs, reduced_len, step, round_up=True)
    assert up >= split and per_up % step == 0
    assert (up - 1) * per_up < reduced_len <= up * per_up, f"{up} pieces of {per_up}"
    if reduced_len // (step * tut["MIN_STEPS"]) >= -(-room // n_programs):  # the pieces would be long enough
        assert n_programs * up >= room, f"round_up: {n_programs} x {up} programs for {room} slots"


def test_strips_that_fill_the_gpu_are_not_split(tut):
    """A matrix with enough column strips to fill the grid gets no split and no second pass, and its sums are
    right; one with a few strips more than a full grid's worth still is not split."""
    room = tut["WAVES"] * tut["NUM_SMS"]
    for dtype in (torch.float32, torch.bfloat16):
        block_n = tut["tile_config"](4096, 4096, dtype, "cols")[1]
        for strips in (room, room // 2 + 1, room - 1):
            x = _input((1024, strips * block_n - 3), dtype, seed=strips)
            out = torch.full((x.shape[1],), float("nan"), device=DEVICE, dtype=dtype)
            config = tut["sum_cols"](x, out)
            assert config["SPLIT"] == 1, f"{tuple(x.shape)} {dtype}: {config}"
            err = _rel_error(out, x.double().sum(0))
            assert err <= TOLERANCE[dtype], f"{tuple(x.shape)} {dtype}: relative error {err:.2e}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_col_tiles_are_counted_in_bytes(tut, dtype):
    """The column kernel's tile holds COL_TILE_BYTES whatever the dtype, COL_BYTES_PER_THREAD per thread."""
    size = torch.empty((), dtype=dtype).element_size()
    block_m, block_n, num_warps = tut["tile_config"](2**20, 4096, dtype, "cols")
    assert block_n * size == tut["COL_BLOCK_BYTES"], f"{dtype}: strip of {block_n} columns"
    assert block_m * block_n * size == tut["COL_TILE_BYTES"], f"{dtype}: tile {block_m} x {block_n}"
    per_thread = block_m * block_n * size // (32 * num_warps)
    assert per_thread == tut["COL_BYTES_PER_THREAD"][size], f"{dtype}: {per_thread} bytes per thread"


# --- the read-only pass (the page's speed of light) reads every byte ---

def _xor_all(words):
    return functools.reduce(operator.xor, words.reshape(-1).tolist(), 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [2, 1000, 4098, 65_538, 100_002])  # whole 32-bit words in bf16 too
def test_read_pass_reads_every_word(tut, dtype, n):
    """The xor of the words the read-only pass stores equals the xor of all the tensor's 32-bit words: a word
    skipped (or read twice) changes it. The page's grids, and small blocks so that many programs (and the
    persistent grid's loop) take part."""
    x = _input((n,), dtype, seed=n + 3)
    words = x.view(torch.int32)
    configs = [*tut["READ_CONFIGS"], dict(block=256, num_warps=4), dict(block=256, num_warps=4, programs_per_sm=1)]
    for config in configs:
        out = tut["read_pass"](x, **config)
        assert out.dtype == torch.int32 and out.numel() >= 1
        assert _xor_all(out) == _xor_all(words), f"n={n} {dtype} {config}: the xor of the words read differs"


def test_read_pass_refuses_what_it_cannot_read_as_words(tut):
    with pytest.raises(ValueError, match="contiguous"):
        tut["read_pass"](torch.zeros(4, 6, device=DEVICE)[:, :4])
    with pytest.raises(ValueError, match="32-bit words"):
        tut["read_pass"](torch.zeros(3, device=DEVICE, dtype=torch.bfloat16))


# --- determinism ---

@pytest.mark.parametrize("case", ["two-pass", "persistent", "reduce_sum", "cols", "rows"])
def test_deterministic_designs_give_identical_bits(tut, case):
    x = _input((70_001,), torch.float32, seed=9)
    xm = x[:70_000].view(700, 100)
    out = torch.empty(1, device=DEVICE)
    col_out, row_out = torch.empty(100, device=DEVICE), torch.empty(700, device=DEVICE)
    run = {
        "two-pass": lambda: (tut["sum_vector"](x, out, "two-pass"), out.clone())[1],
        "persistent": lambda: (tut["sum_vector"](x, out, "persistent"), out.clone())[1],
        "reduce_sum": lambda: tut["reduce_sum"](x),
        "cols": lambda: (tut["sum_cols"](xm, col_out), col_out.clone())[1],
        "rows": lambda: (tut["sum_rows"](xm.t(), col_out), col_out.clone())[1],
    }[case]
    first = run()
    for _ in range(4):
        again = run()
        assert torch.equal(again.view(torch.int32), first.view(torch.int32)), f"{case}: {again} != {first}"


def test_determinism_table_says_what_it_measured(tut):
    table = tut["determinism"]
    for design in ("sum_vector, two-pass", "sum_vector, persistent", "sum_cols (dim=0)"):
        assert table.loc[design, "distinct results"] == 1, f"{design} was not reproducible:\n{table}"


def test_bf16_running_sums_lose_digits(tut):
    demo = tut["demo"]
    assert demo["error, fp32"].max() < 1e-5, demo
    assert demo["error, bf16"].iloc[-1] > 0.1, f"the bf16 accumulator should visibly fail:\n{demo}"


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
    with pytest.raises(IndexError, match="out of range"):
        reduce_sum(x, 2)
    with pytest.raises(IndexError, match="out of range"):
        reduce_sum(x, -3)
    with pytest.raises(TypeError, match="several dims"):
        reduce_sum(x, (0, 1))
    with pytest.raises(TypeError, match="None or an int"):
        reduce_sum(x, 0.5)
    assert torch.equal(reduce_sum(x, (1,)), torch.sum(x, 1))  # a 1-tuple is one dim, as in torch
    if DEVICE == "cuda":
        with pytest.raises(ValueError, match="CUDA GPU is in use"):
            reduce_sum(torch.ones(4))
    else:
        with pytest.raises(ValueError, match="interpreter"):
            reduce_sum(torch.ones(4, device="meta"))
