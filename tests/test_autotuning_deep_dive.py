"""Deep dive 14 (tutorials/deep_dives/14_autotuning_against_a_launch_model.py): one kernel launched three ways, at the
model's config, at triton.autotune's pick from the model's own space, and as Helion's kernel. It carries the core
page's kernel, config and Helion lines letter for letter; each way matches float64; its table holds every point of
its sweep with each way's columns; the space holds every pick the model makes; and the sentences a GPU's run prints
read a made-up sweep as they would a measured one.

Without a GPU the page runs through Triton's interpreter on the CPU (sizes stay small); Helion, where installed, in its
reference mode.
"""

import ast
import importlib.util
import inspect
import itertools
import json
import math
import re
import types

import pytest
import torch

from conftest import DEVICE, ROOT, LazyTutorial

PAGE = LazyTutorial("14_autotuning_against_a_launch_model")
CORE = LazyTutorial("01_fused_softmax")
HAS_HELION = importlib.util.find_spec("helion") is not None
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def definition(stem, name):
    """The source text of a page's definition of name (at any depth: Helion's kernel sits under ``if helion:``),
    decorators included."""
    path = next((ROOT / "tutorials").rglob(f"{stem}.py"))
    source = path.read_text(encoding="utf-8")
    (node,) = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == name]
    lines = source.splitlines(keepends=True)
    return "".join(lines[(node.decorator_list[0] if node.decorator_list else node).lineno - 1 : node.end_lineno])


def constant_lines(stem, names):
    """The page's top-level lines that set names, comments included."""
    path = next((ROOT / "tutorials").rglob(f"{stem}.py"))
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.split(" = ")[0] in names]


def test_the_page_carries_the_core_pages_kernel_and_config_letter_for_letter():
    for name in ("softmax_fwd_kernel",):
        assert inspect.getsource(PAGE[name].fn) == inspect.getsource(CORE[name].fn), f"{name} is not 01's"
    for name in ("min_tile_bytes", "_fused_config"):
        assert inspect.getsource(PAGE[name]) == inspect.getsource(CORE[name]), f"{name} is not 01's"
    names = ("MAX_FUSED_N", "BYTES_PER_THREAD", "LATENCY")
    lines = constant_lines("14_autotuning_against_a_launch_model", names)
    assert len(lines) == 3 and lines == constant_lines("01_fused_softmax", names), "the model's numbers are not 01's"
    for n in (1, 7, 256, 1000, 4096, 16384, 32768):
        for size in (2, 4):
            assert PAGE["_fused_config"](n, size) == CORE["_fused_config"](n, size)


def test_the_page_carries_the_core_pages_helion_kernel_and_reader():
    """Helion's kernel and the reader of its stored configs are the core page's lines: the configs that
    dev/helion_tune.py tunes for the core page's kernel at its points are this page's kernel's at the same points."""
    for name in ("helion_softmax", "helion_tuned"):
        page, core = (definition(stem, name) for stem in ("14_autotuning_against_a_launch_model", "01_fused_softmax"))
        assert page == core, f"{name} is not 01's, letter for letter"
    source = (ROOT / "tutorials" / "deep_dives" / "14_autotuning_against_a_launch_model.py").read_text()
    assert 'helion_tuned(helion_softmax, "softmax forward",' in source
    assert "[(str(t)[6:], n) for t in SWEEP_DTYPES for n in SWEEP_N])" in source, "Helion's points are not the sweep's"


def rel_err(y, x):
    y64 = torch.softmax(x.double(), dim=-1)
    return ((y.double() - y64).norm() / y64.norm()).item()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (9, 100), (33, 257), (3, 4096), (2, 5000)])
def test_model_and_autotuner_match_float64(shape, dtype):
    """The model's launch and the autotuner's (which tunes at each new row length and dtype, so its pick runs)."""
    torch.manual_seed(shape[1])
    x = torch.randn(shape, device=DEVICE, dtype=dtype).mul_(4)
    tolerance = PAGE["TOLERANCE"][str(dtype)[6:]]
    for way in ("model_softmax", "autotuned_softmax"):
        y = PAGE[way](x)
        assert y.shape == x.shape and y.dtype == x.dtype and not y.isnan().any(), way
        assert rel_err(y, x) <= tolerance, f"{way} {str(dtype)[6:]} {shape}: {rel_err(y, x):.2e} over {tolerance}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_every_config_of_the_space_matches_float64(dtype):
    """Whatever the autotuner picks is right: every config of the pruned space, launched directly."""
    x = torch.randn(11, 1000, device=DEVICE, dtype=dtype)
    block_n = 1024
    configs = PAGE["fits"](PAGE["SPACE"], {"x_ptr": x}, BLOCK_N=block_n)
    most = 4 * PAGE["BYTES_PER_THREAD"] * 32  # bytes of a tile a warp may hold
    assert len(configs) == sum(  # 16 x 1024 fits MAX_FUSED_N: only the bytes a thread prune
        c.kwargs["BLOCK_M"] * block_n * x.element_size() <= most * c.num_warps for c in PAGE["SPACE"]
    )
    for config in configs:
        y = torch.full_like(x, math.nan)
        block_m = config.kwargs["BLOCK_M"]
        PAGE["softmax_fwd_kernel"][(math.ceil(11 / block_m),)](
            x, y, *x.shape, x.stride(0), y.stride(0), BLOCK_M=block_m, BLOCK_N=block_n, num_warps=config.num_warps
        )
        assert rel_err(y, x) <= PAGE["TOLERANCE"][str(dtype)[6:]], config


@pytest.mark.skipif(not HAS_HELION, reason="Helion is not installed: the page shows no Helion column")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_helion_matches_float64(dtype, monkeypatch):
    """Helion's kernel as the page runs it here (on the CPU its reference mode: eager PyTorch on the tiles; on a GPU
    at Helion's default config, as these shapes have none stored and autotuning is the page's own business)."""
    monkeypatch.delenv("SOL_HELION_AUTOTUNE", raising=False)
    ways = PAGE["ways"]()
    for shape in [(7, 1), (33, 257), (3, 4096)]:
        x = torch.randn(shape, device=DEVICE, dtype=dtype).mul_(4)
        if DEVICE == "cuda":
            bound = PAGE["helion_softmax"].bind((x,))
            bound.set_config(bound.config_spec.default_config())
        assert rel_err(ways["Helion"](x), x) <= PAGE["TOLERANCE"][str(dtype)[6:]], shape


def test_the_sweep_checked_each_way_against_float64():
    results = PAGE["results"]
    for way in ["model", "autotuner"] + (["Helion"] if HAS_HELION else []):
        errors = results[f"{way}: error"]
        limits = errors.index.get_level_values("dtype").map(PAGE["TOLERANCE"])
        assert (errors.to_numpy() <= limits.to_numpy()).all(), errors


def test_the_table_has_every_point_and_each_ways_columns():
    results, table = PAGE["results"], PAGE["table"].data
    points = [(str(t)[6:], n) for t in PAGE["SWEEP_DTYPES"] for n in PAGE["SWEEP_N"]]
    assert {str(t)[6:] for t in PAGE["SWEEP_DTYPES"]} == {"float32", "bfloat16"}
    assert PAGE["SWEEP_N"][0] == 256 and PAGE["SWEEP_N"][-1] == 16384
    assert list(results.index) == points and list(table.index) == points
    ways = ["model", "autotuner"] + (["Helion"] if HAS_HELION else [])
    for way in ways:
        for column in ("GB/s", "% of light", "first call s", "config"):
            assert f"{way}: {column}" in results, f"no {way!r} {column!r}"
    assert not [c for c in results if c.startswith("Helion")] or HAS_HELION, "a Helion column without Helion"
    assert "autotuner: configs tried" in results and "copy: GB/s" in results
    assert ("model", "config") in table and ("autotuner", "configs tried") in table
    if torch.cuda.is_available():
        for way in ways:
            assert (way, "GB/s") in table and (way, "% of light") in table and (way, "config") in table
        assert ("autotuner", "first call s") in table
    else:  # the interpreter's times are no speeds, and its picks follow them: neither is shown
        assert not [c for c in table if c[1] in ("GB/s", "% of light")] and ("autotuner", "config") not in table


def test_the_space_holds_every_pick_of_the_model():
    """The space is BLOCK_M from 1 to 16 by num_warps from 1 to 32, powers of two; pruned to tiles of at most
    MAX_FUSED_N and 4 x BYTES_PER_THREAD bytes a thread, it holds the model's pick at every row length from 256 to
    MAX_FUSED_N, and one or two warps where a tile is small."""
    space, fits, config = PAGE["SPACE"], PAGE["fits"], PAGE["_fused_config"]
    pairs = {(c.kwargs["BLOCK_M"], c.num_warps) for c in space}
    assert pairs == set(itertools.product([1, 2, 4, 8, 16], [1, 2, 4, 8, 16, 32])) and len(space) == len(pairs)
    most = 4 * PAGE["BYTES_PER_THREAD"]
    for n in [256, 257, 1000, 4096, 5000, 16384, 20000, 32768]:
        for size, dtype in ((2, torch.bfloat16), (4, torch.float32)):
            block_m, block_n, num_warps = config(n, size)
            x = {"x_ptr": torch.empty(0, dtype=dtype)}
            tried = {(c.kwargs["BLOCK_M"], c.num_warps) for c in fits(space, x, BLOCK_N=block_n)}
            assert (block_m, num_warps) in tried, f"N = {n}, {size} bytes: the model's pick is not in the space"
            assert all(m * block_n <= PAGE["MAX_FUSED_N"] and m * block_n * size <= most * 32 * w for m, w in tried)
            if block_n * size <= 32 * most:  # a row that one warp holds within the bound: it is tried
                assert (1, 1) in tried, f"N = {n}, {size} bytes: no one-warp config tried"
            assert PAGE["model_pick"](n, size, PAGE["min_tile_bytes"](), PAGE["BYTES_PER_THREAD"]) == (
                block_m,
                num_warps,
            )
    assert PAGE["space"]["model's pick in the space"].all()


def test_the_autotuner_tried_the_pruned_space_at_each_point():
    results, tuning = PAGE["results"], PAGE["tuning"]
    assert sorted(tuning) == sorted(results.index)
    for (dtype, n), times in tuning.items():
        block_n = 2 ** math.ceil(math.log2(n))
        x = {"x_ptr": torch.empty(0, dtype=getattr(torch, dtype))}
        tried = {(c.kwargs["BLOCK_M"], c.num_warps) for c in PAGE["fits"](PAGE["SPACE"], x, BLOCK_N=block_n)}
        assert set(times) == tried and results.loc[(dtype, n), "autotuner: configs tried"] == len(tried)
        pick = re.fullmatch(r"(\d+) x (\d+), (\d+) warps", results.loc[(dtype, n), "autotuner: config"])
        # the pick's median is the least: Triton's autotuner takes the least [median, 20th, 80th percentile] list,
        # so of configs whose medians tie it may take any
        assert times[int(pick[1]), int(pick[3])] == min(times.values()) and int(pick[2]) == block_n, (dtype, n)


# A made-up GPU and a made-up sweep: the functions that read a GPU's run (its table, the sentences, the refit), which
# a CPU's run never calls
PROPS = types.SimpleNamespace(
    name="Made-up GPU",
    multi_processor_count=132,
    max_threads_per_multi_processor=2048,
    memory_clock_rate=3_200_000,
    memory_bus_width=5120,
    total_memory=80 * 2**30,
    major=9,  # Triton reads the capability through these properties to pick its target: the real one's on a GPU
    minor=0,
)


@pytest.fixture
def on_a_gpu(monkeypatch):
    if torch.cuda.is_available():
        torch.cuda.init()  # CUDA's first use reads the real device's properties, not the made-up ones below
        major, minor = torch.cuda.get_device_capability()
        monkeypatch.setattr(PROPS, "major", major)
        monkeypatch.setattr(PROPS, "minor", minor)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *args, **kwargs: PROPS)
    monkeypatch.setitem(PAGE["bench"].__globals__, "ON_GPU", True)
    PAGE["min_tile_bytes"].cache_clear()  # it reads the device once
    yield PAGE["bench"].__globals__
    PAGE["min_tile_bytes"].cache_clear()


def made_up_sweep(page, best_pair):
    """(results, tuning) as a GPU's sweep gives them: every config of the pruned space timed, the fastest the pick of
    the model with (tile bytes, bytes a thread) = best_pair, slower the further a config's tile and warps are from
    it; the page's timings follow the autotuner's."""
    rows, tuning = [], {}
    for dtype in page["SWEEP_DTYPES"]:
        for n in page["SWEEP_N"]:
            name, size, block_n = str(dtype)[6:], dtype.itemsize, 2 ** math.ceil(math.log2(n))
            best = page["model_pick"](n, size, *best_pair)
            times = {
                (c.kwargs["BLOCK_M"], c.num_warps): 1.0
                + 0.1 * abs(math.log2(c.kwargs["BLOCK_M"] / best[0]))
                + 0.05 * abs(math.log2(c.num_warps / best[1]))
                for c in page["fits"](page["SPACE"], {"x_ptr": torch.empty(0, dtype=dtype)}, BLOCK_N=block_n)
            }
            tuning[name, n] = times
            model = page["model_pick"](n, size, page["min_tile_bytes"](), page["BYTES_PER_THREAD"])
            row = {"dtype": name, "N": n, "copy: GB/s": 4000.0}
            for way, pick, first in (("model", model, 0.5), ("autotuner", best, 9.0), ("Helion", (best[0], 8), 2.0)):
                ms = times.get(pick, 1.2) * 0.1
                row |= {
                    f"{way}: ms": ms,
                    f"{way}: GB/s": 300.0 / ms,
                    f"{way}: first call s": first,
                    f"{way}: error": 0.0,
                }
                row[f"{way}: % of light"] = 100 * row[f"{way}: GB/s"] / 4000.0
                row[f"{way}: config"] = page["describe"](pick[0], block_n, pick[1])
            row["autotuner: configs tried"] = len(times)
            rows.append(row)
    import pandas as pd

    return pd.DataFrame(rows).set_index(["dtype", "N"]), tuning


def test_a_gpus_run_reads_its_numbers_and_refits_the_model(on_a_gpu):
    page = on_a_gpu
    now = (page["min_tile_bytes"](), page["BYTES_PER_THREAD"])
    assert now == (2048, 128)  # 4.1 TB/s, a microsecond, 132 SMs: 31 KB an SM over 16 programs, 1.9 KB each
    results, tuning = made_up_sweep(page, (8192, 64))
    table = page["summary"](results).data
    assert ("autotuner", "first call s") in table and ("Helion", "% of light") in table and ("copy", "GB/s") in table
    page["plot"](results)
    text = page["reading"](results)
    same = (results["autotuner: config"] == results["model: config"]).sum()
    assert f"picked the model's own config at {same} of {len(results)} points" in text, text
    assert "tuning pays for itself after about" in text and "Helion's first call took" in text, text
    assert "nan" not in text.lower() and "inf" not in text.lower(), text
    fits = page["refit"](tuning)
    assert tuple(fits.iloc[0][["tile bytes", "bytes a thread"]]) == (8192, 64), fits.head()
    assert fits.iloc[0]["time / best"] == 1.0 and fits.iloc[0]["same picks"] == len(results)
    advice = page["adjusting"](page["implied"](results, tuning), fits)
    assert "tiles of 8,192 bytes or more and 64 bytes a thread" in advice and "LATENCY between" in advice, advice

    results, tuning = made_up_sweep(page, now)  # the model picks the best config everywhere
    text = page["reading"](results)
    assert f"the model's own config at {len(results)} of {len(results)} points." in text, text
    assert "the tuning confirmed the model and bought nothing else" in text, text
    fits = page["refit"](tuning)
    assert fits.iloc[0]["the model's"], fits.head()
    assert "the model's numbers (tiles of 2,048 bytes or more, 128 bytes a thread) stand" in page["adjusting"](
        page["implied"](results, tuning), fits
    )


def test_a_gpus_run_counts_only_gains_past_its_noise_and_names_helions_code_where_the_launch_is_the_models(on_a_gpu):
    """A pick that beats the model's launch by under 1% bought nothing measurable; where Helion ran the model's own
    launch (rows a tile, warps) more than 1% slower, the gap lies past the tile, and the reading says so at those
    points."""
    page = on_a_gpu
    results, _ = made_up_sweep(page, (8192, 64))
    differ = results["autotuner: config"] != results["model: config"]
    assert differ.any()
    results.loc[differ, "autotuner: ms"] = results.loc[differ, "model: ms"] / 1.005  # 0.5% faster: noise
    results["autotuner: GB/s"] = 300.0 / results["autotuner: ms"]
    text = page["reading"](results)
    assert "pays for itself" not in text and "the tuning bought nothing measurable" in text, text
    assert "Helion ran the model's own launch" not in text, text  # made_up_sweep's Helion: 8 warps, not the model's

    first, second = results.index[:2]
    for key, slower in ((first, 1.05), (second, 1.08)):
        results.loc[key, "Helion: config"] = results.loc[key, "model: config"]
        results.loc[key, "Helion: ms"] = results.loc[key, "model: ms"] * slower
        results.loc[key, "Helion: GB/s"] = 300.0 / results.loc[key, "Helion: ms"]
    text = page["reading"](results)
    said = f"At {first[0]} N = {first[1]}, {second[0]} N = {second[1]} Helion ran the model's own launch"
    assert said in text and "4.8-7.4% slower than the model's" in text, text
    assert "what else its config sets" in text, text


def test_helions_search_time_is_read_from_the_stored_configs_and_reported(on_a_gpu, tmp_path, monkeypatch):
    """Helion's stored configs carry their search's seconds and configs tested where dev/helion_tune.py recorded
    them: the page reads them for this GPU and op only, shows them as columns, and the reading gives their span and
    sum beside the autotuner's; where none was stored it says so, with no NaN."""
    page = on_a_gpu
    store = {
        page["WHERE"]: {
            "configs": {
                "softmax forward": {
                    "float32": {"256": {"config": {}, "seconds": 12.5, "tested": 80}, "1024": {"config": {}}},
                    "bfloat16": {"4096": {"config": {}, "seconds": 30.0}},
                },
                "softmax backward": {"float32": {"512": {"config": {}, "seconds": 99.0}}},
            }
        },
        "Another GPU": {"configs": {"softmax forward": {"float32": {"16384": {"config": {}, "seconds": 77.0}}}}},
    }
    path = tmp_path / "configs.json"
    path.write_text(json.dumps(store))
    monkeypatch.setenv("SOL_HELION_CONFIGS", str(path))
    searched = page["helion_searches"]("softmax forward")
    assert searched.keys() == {("float32", 256), ("float32", 1024), ("bfloat16", 4096)}, searched
    assert searched["float32", 256] == (12.5, 80) and searched["bfloat16", 4096][0] == 30.0
    assert all(math.isnan(v) for v in (*searched["float32", 1024], searched["bfloat16", 4096][1]))
    monkeypatch.setenv("SOL_HELION_CONFIGS", str(tmp_path / "absent.json"))
    assert page["helion_searches"]("softmax forward") == {}

    results, _ = made_up_sweep(page, (8192, 64))
    text = page["reading"](results)  # no column: no time stored
    assert "search's time was not stored with its configs" in text and "nan" not in text.lower(), text
    for i, column in enumerate(("tuned s", "configs tested")):
        results[f"Helion: {column}"] = [searched.get(key, (math.nan, math.nan))[i] for key in results.index]
    assert {("Helion", "tuned s"), ("Helion", "configs tested")} <= set(page["summary"](results).data)
    text = page["reading"](results)
    tried = results["autotuner: configs tried"]
    assert f"took 12.5-30 s a point at the 2 of {len(results)} points whose time was stored (42.5 s in all)" in text
    span = f"{tried.min()}" + (f"-{tried.max()}" if tried.max() > tried.min() else "")
    assert f"and tested 80 configs a point (80 in all; the autotuner tried {span})." in text, text
    assert "nan" not in text.lower(), text


def test_a_pick_below_the_models_floor_of_warps_is_named_a_missing_term(on_a_gpu):
    """Where the autotuner's fastest config has fewer than 4 warps, no pair of the model's numbers gives it: the last
    section says so at those points, a term the model lacks, and says nothing of it where every pick has 4 or more."""
    page = on_a_gpu
    results, tuning = made_up_sweep(page, (page["min_tile_bytes"](), page["BYTES_PER_THREAD"]))
    quiet = page["adjusting"](page["implied"](results, tuning), page["refit"](tuning))
    assert "fewer than 4 warps" not in quiet, quiet
    times = tuning["bfloat16", 256]
    assert (2, 1) in times, "one warp is not in the pruned space at bf16 N = 256"
    times[2, 1] = min(times.values()) / 2
    text = page["adjusting"](page["implied"](results, tuning), page["refit"](tuning))
    assert "At bfloat16 N = 256 the autotuner picked fewer than 4 warps, below the model's floor" in text, text
    # and what that floor cost the model there, by the autotuner's own timings: its config against the one-warp pick
    model_time = times[tuple(page["_fused_config"](256, 2)[i] for i in (0, 2))]
    assert f"That floor cost it {model_time / times[2, 1]:.3f}x the best config's time there" in text, text
