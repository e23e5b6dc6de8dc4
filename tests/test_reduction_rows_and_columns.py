"""Tests for deep dive 31 (tutorials/deep_dives/31_reduction_rows_and_columns.py): the split row kernel and the
column kernel against float64 on poisoned outputs (splits and second passes forced on small shapes), the split
and tile choices, bitwise determinism, the drop-in sum_dim, the carried read-only pass, the carried core design,
which must be the row-sum page's (tutorials/03_parallel_reduction.py), the whole sum's three designs, whose persistent
grid must be the whole-sum page's (tutorials/03_sum_of_all_elements.py), and the running-sum demo."""

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
def tut():
    return load_tutorial("31_reduction_rows_and_columns")


@pytest.fixture(scope="module")
def core():
    """The row-sum page: the core row kernel and its launch."""
    return load_tutorial("03_parallel_reduction")


@pytest.fixture(scope="module")
def whole():
    """The whole-sum page: the persistent grid."""
    return load_tutorial("03_sum_of_all_elements")


def _rel_error(out, ref):
    ref = ref.double()
    scale = ref.norm().item()
    return (out.double() - ref).norm().item() / (scale if scale > 0 else 1.0)


def _input(shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen) + 0.05).to(dtype).to(DEVICE)  # sums stay in fp16 range


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape", [(1, 1), (5, 3), (300, 17), (17, 300), (2, 9000), (9000, 2), (257, 129), (40_009, 3), (3, 40_009)]
)  # the last two need SPLIT > 1
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


@pytest.mark.parametrize("block_n", [16, 64, 128, 256, 1024])
def test_col_kernel_strip_widths_of_the_layout_table(tut, block_n):
    x = _input((513, 300), torch.float32, seed=block_n)
    out = torch.full((300,), float("nan"), device=DEVICE)
    config = tut["sum_cols"](x, out, block_n=block_n)
    assert config["BLOCK_N"] == block_n
    assert _rel_error(out, x.double().sum(0)) <= 1e-6, config


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


@pytest.mark.parametrize("case", ["cols", "rows", "rows split", "cols split"])
def test_split_sums_give_identical_bits(tut, case):
    x = _input((70_000,), torch.float32, seed=9)
    xm = x.view(700, 100)
    long_rows, tall = _input((3, 40_009), torch.float32, seed=10), _input((40_009, 3), torch.float32, seed=11)
    col_out, row_out, three = (
        torch.empty(100, device=DEVICE),
        torch.empty(700, device=DEVICE),
        torch.empty(3, device=DEVICE),
    )
    run = {
        "cols": lambda: (tut["sum_cols"](xm, col_out), col_out.clone())[1],
        "rows": lambda: (tut["sum_rows"](xm, row_out), row_out.clone())[1],
        "rows split": lambda: (tut["sum_rows"](long_rows, three), three.clone())[1],
        "cols split": lambda: (tut["sum_cols"](tall, three), three.clone())[1],
    }[case]
    first = run()
    for _ in range(4):
        again = run()
        assert torch.equal(again.view(torch.int32), first.view(torch.int32)), f"{case}: {again} != {first}"


def _random_shapes(seed):
    rng = random.Random(seed)
    sizes = [1, 2, 3, 7, 16, 31, 64, 127, 257, 1000, 2053]
    shapes = [(rng.choice(sizes), rng.choice(sizes)) for _ in range(8)]
    return [s for s in shapes if s[0] * s[1] <= 300_000] + [(1, 5003), (5003, 1), (4, 9, 17), (2, 3, 4, 5), (3, 1, 70)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", _random_shapes(seed=3))
def test_sum_dim_matches_float64_on_every_dim(tut, shape, dtype):
    x = _input(shape, dtype, seed=len(shape) * 7919 + shape[0])
    for dim in range(-len(shape), len(shape)):
        out = tut["sum_dim"](x, dim)
        ref = x.double().sum(dim)
        assert out.shape == ref.shape and out.dtype == dtype, f"{shape} dim={dim}: {out.shape} {out.dtype}"
        err = _rel_error(out, ref)
        assert err <= TOLERANCE[dtype], f"{shape} dim={dim} {dtype}: relative error {err:.2e}"


def test_sum_dim_non_contiguous_and_empty(tut):
    base = _input((130, 90), torch.float32, seed=11)
    for x in (base.t(), base[::3, 1::2], base[:, :45]):
        for dim in (0, 1):
            assert _rel_error(tut["sum_dim"](x, dim), x.double().sum(dim)) <= 1e-6, (x.stride(), dim)
    for shape, dim in [((0, 5), 0), ((0, 5), 1), ((5, 0), 0), ((2, 0, 3), 1)]:
        x = torch.empty(shape, device=DEVICE)
        assert torch.equal(tut["sum_dim"](x, dim), torch.sum(x, dim)), (shape, dim)


def test_sum_dim_is_an_operator_a_compiled_model_keeps(tut):
    """sum_dim is a PyTorch operator: opcheck (schema, fake tensor, no aliasing) on a row and a column sum, and
    torch.compile(fullgraph=True) with the graph-only backend gives eager's values."""
    x = _input((37, 41), torch.float32, seed=3)
    for dim in (0, 1, -1):
        torch.library.opcheck(tut["sum_dim"], (x, dim), test_utils=("test_schema", "test_faketensor"))
    compiled = torch.compile(lambda t: tut["sum_dim"](t * 2, 0), fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x), tut["sum_dim"](x * 2, 0))


@pytest.mark.parametrize("shape, dim", [((4, 5), 2), ((4, 5), -3), ((), 0)])
def test_sum_dim_refuses_a_dim_the_tensor_lacks(tut, shape, dim):
    with pytest.raises(IndexError, match="sum_dim: dim"):
        tut["sum_dim"](torch.ones(shape, device=DEVICE), dim)


# --- what the page carries from the core page must be the core page's ---


@pytest.mark.parametrize(
    "n_rows,n_cols",
    [(1, 1), (1, 5003), (5003, 1), (3, 40_009), (40_009, 3), (256, 16), (64, 4096), (2, 2**20), (2**20, 128)],
)
def test_carried_core_design_is_the_core_pages(tut, core, n_rows, n_cols):
    assert tut["_core_row_config"](n_rows, n_cols) == core["_row_config"](n_rows, n_cols)
    assert inspect.getsource(tut["row_sum_kernel"].fn) == inspect.getsource(core["row_sum_kernel"].fn)


@pytest.mark.parametrize("shape", [(5, 3), (300, 17), (3, 40_009), (40_009, 3)])
@pytest.mark.parametrize("transposed", [False, True])
def test_carried_core_launch_gives_the_core_pages_bits(tut, core, shape, transposed):
    x = _input(shape, torch.bfloat16, seed=sum(shape) + 1)
    x = x.t() if transposed else x
    ours = torch.full((x.shape[0],), float("nan"), device=DEVICE, dtype=x.dtype)
    theirs = torch.full_like(ours, float("nan"))
    assert tut["core_sum_rows"](x, ours)["SPLIT"] == 1
    core["sum_rows"](x, theirs)
    assert torch.equal(ours, theirs), f"{tuple(x.shape)}: the carried core launch differs from the core page's"
    assert _rel_error(ours, x.double().sum(1)) <= TOLERANCE[torch.bfloat16]


def test_split_rows_agree_with_core_where_no_split(tut, core):
    """Where this page does not split (SPLIT == 1), its row sum is the core launch: the same bits."""
    x = _input((300, 17), torch.float32, seed=5)
    a, b = torch.empty(300, device=DEVICE), torch.empty(300, device=DEVICE)
    assert tut["sum_rows"](x, a)["SPLIT"] == 1
    core["sum_rows"](x, b)
    assert torch.equal(a, b)


def _xor_all(words):
    return functools.reduce(operator.xor, words.reshape(-1).tolist(), 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [2, 4098, 100_002])
def test_carried_read_pass_reads_every_word(tut, dtype, n):
    x = _input((n,), dtype, seed=n + 3)
    small = [dict(block=256, num_warps=4)] * (DEVICE == "cuda" or n <= 4098)  # many programs: slow in the interpreter
    for config in [*tut["READ_CONFIGS"], *small]:
        out = tut["read_pass"](x, **config)
        assert _xor_all(out) == _xor_all(x.view(torch.int32)), f"n={n} {dtype} {config}"


def test_page_tables_say_what_they_measured(tut):
    errors = tut["errors"]
    assert errors["same bits twice"].all(), errors
    layout = tut["layout"]
    assert "row kernel on x.T (core design)" in layout.index and "column kernel, default" in layout.index
    results = tut["results"]
    for sweep in ("rows", "cols"):
        providers = set(results[results.sweep == sweep].provider)
        assert {"torch", "core design", "ours"} <= providers, f"{sweep}: {providers}"


# --- the whole sum's designs and the running sums ---


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


def test_sum_vector_refuses_what_it_cannot_read(tut):
    out = torch.empty(1, device=DEVICE)
    for x, design in [(torch.arange(10.0, device=DEVICE)[::2], "persistent"), (torch.ones(8, device=DEVICE), "fast")]:
        with pytest.raises(ValueError, match="unit-stride 1-D"):
            tut["sum_vector"](x, out, design)


@pytest.mark.parametrize("n", [1000, 70_001])
def test_persistent_design_has_the_core_pages_grid(tut, whole, n):
    """31's persistent design walks the whole-sum page's grid; only the partials' adding differs (a second launch)."""
    x = _input((n,), torch.bfloat16, seed=n)
    ours, theirs = torch.empty(1, device=DEVICE), torch.empty(1, device=DEVICE)
    assert tut["sum_vector"](x, ours, "persistent") == whole["sum_vector"](x, theirs)
    exact, scale = x.double().sum(), x.double().abs().sum()
    for got in (ours, theirs):
        assert abs(got.double() - exact) <= 1e-5 * scale, (got, exact)


@pytest.mark.parametrize("design", ["two-pass", "persistent"])
def test_ordered_designs_give_identical_bits(tut, design):
    x = _input((70_001,), torch.float32, seed=9)
    out = torch.empty(1, device=DEVICE)
    first = (tut["sum_vector"](x, out, design), out.clone())[1]
    for _ in range(4):
        tut["sum_vector"](x, out, design)
        assert torch.equal(out.view(torch.int32), first.view(torch.int32)), f"{design}: {out} != {first}"


def test_vector_table_says_what_it_measured(tut):
    vector = tut["vector"]
    assert set(vector.design) == {"torch.sum", "atomic", "two-pass", "persistent"}, set(vector.design)
    ordered = vector[vector.design.isin(["two-pass", "persistent"])]
    assert (ordered["distinct results"] == 1).all(), ordered
    ours = vector[vector.design != "torch.sum"]  # fp32 sums; torch.sum's of bf16 is rounded to bf16
    # fp32 sums of up to 2**28 elements: the atomic design adds 2**16 partials in an order that varies, ~sqrt(n) eps
    assert (vector["GB/s"] > 0).all() and (ours.error <= 1e-4).all(), vector


def test_bf16_running_sums_lose_digits(tut):
    demo = tut["demo"]
    assert demo["error, fp32"].max() < 1e-5, demo
    assert demo["error, bf16"].iloc[-1] > 0.1, f"the bf16 accumulator should visibly fail:\n{demo}"
