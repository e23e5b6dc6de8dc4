"""The landing page's summary of what the tutorials measured (docs/_ext/sol_results.py), and the contract
between a page that writes its results and the build that reads them.

Most tests run the reader and the build's two handlers on small made-up trees (fast); the last ones read the
site that the session's `built_site` fixture built once (tests/conftest.py).
"""

import ast
import html
import json
import math
import os
import pathlib
import re
import sys
import types

import pandas as pd
import pytest

from conftest import ROOT, SHOWN_NOT_RUN, TUTORIALS

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import sol_results  # noqa: E402

COLUMNS = ["ours, % of light", "ours / best peer"]
WRITERS = [p for p in TUTORIALS if "SOL_RESULTS" in p.read_text(encoding="utf-8")]
# pages whose ranks run in processes of their own (torch.multiprocessing): the page itself allocates no GPU memory,
# and its ranks measure on GPUs only
SPAWNING = {p.stem for p in TUTORIALS if "torch.multiprocessing" in p.read_text(encoding="utf-8")}
NAN = float("nan")


def page_table():
    """A summary table as the pages make it: indexed by direction, dtype and N, a peer missing at one point, and the
    page's recommended column (its range: N up to 1024)."""
    index = pd.MultiIndex.from_tuples(
        [("forward", "float32", n) for n in (256, 1024, 4096)]
        + [("backward", "float32", n) for n in (256, 1024, 4096)],
        names=["direction", "dtype", "N"],
    )
    return pd.DataFrame(
        {
            "ours, % of light": [50.0, 90.0, 70.0, 40.0, 60.0, NAN],
            "ours / best peer": [0.8, 1.5, 1.1, NAN, 2.0, NAN],
            "speed of light": 1000.0,
            "recommended": [1, 1, 0, 1, 1, 0],
        },
        index=index,
    )


def results_of(**pages):
    """{stem: the DataFrame read_results gives} from {stem: [(direction, dtype, N, % of light, ratio, recommended)]}."""
    return {stem: pd.DataFrame(rows, columns=list(sol_results.COLUMNS)) for stem, rows in pages.items()}


def sweep(direction, dtype, sizes, light, ratio, recommended):
    """Rows of one made-up sweep; light, ratio, recommended: one value for all sizes, or one per size."""
    each = lambda v: v if isinstance(v, list) else [v] * len(sizes)  # noqa: E731
    return [
        (direction, dtype, n, percent, r, f)
        for n, percent, r, f in zip(sizes, each(light), each(ratio), each(recommended))
    ]


PAGES = {
    stem: (
        f"tutorials/{'' if stem[0] == '0' else 'deep_dives/'}{stem}",
        stem.split("_", 1)[1].replace("_", " ").capitalize(),
        True,
    )
    for stem in ("01_softmax", "11_long_rows", "12_staged", "02_layer_norm", "02_layer_norm_locks", "23_wide_backward")
}


def test_what_a_page_writes_the_build_reads(tmp_path):
    """The pages' block (two columns of their table and recommended, to_csv) gives one summary row per direction and
    dtype; a core page's points past its range are a row of their own."""
    page_table()[[*COLUMNS, "recommended"]].to_csv(tmp_path / "01_fused_softmax.csv")
    found = sol_results.read_results(tmp_path)
    assert list(found) == ["01_fused_softmax"]
    forward, backward = sol_results.summarize(found["01_fused_softmax"])
    assert forward["what"] == "forward, float32" and backward["what"] == "backward, float32", (
        "rows out of the page's order"
    )
    assert (forward["best"], forward["best at"], forward["lowest"], forward["lowest at"]) == (90.0, 1024, 50.0, 256)
    assert (forward["worst ratio"], forward["worst at"], forward["median ratio"], forward["peer points"]) == (
        0.8,
        256,
        1.1,
        3,
    )
    # a point where ours was not measured counts nowhere; a point with no peer counts only for % of light
    assert (backward["best"], backward["lowest"], backward["sizes"]) == (60.0, 40.0, [256, 1024, 4096])
    assert (backward["worst ratio"], backward["median ratio"], backward["peer points"]) == (2.0, 2.0, 1)
    recommended, _ = sol_results.recommend(found)
    chosen = {(r["direction"], r["dtype"], n): (r["stem"], r["claimed"]) for r in recommended for n in r["sizes"]}
    inside, past, backward_inside, backward_past = sol_results.summarize(
        found["01_fused_softmax"], "01_fused_softmax", chosen
    )
    assert (inside["what"], inside["sizes"], inside["lowest"]) == ("forward, float32", [256, 1024], 50.0)
    assert (past["what"], past["sizes"], past["see"]) == (
        "forward, float32, past its range",
        [4096],
        [("01_fused_softmax", False, [4096])],
    )
    assert (backward_inside["sizes"], backward_past["sizes"], math.isnan(backward_past["best"])) == (
        [256, 1024],
        [4096],
        True,
    )


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: t.drop(columns="recommended"), r"no column 'recommended'"),
        (lambda t: t.reset_index("direction", drop=True), r"no column 'direction'"),
        (lambda t: t.drop(columns="ours / best peer"), r"no column 'ours / best peer'"),
        (lambda t: t.assign(recommended=2), r"'recommended' holds something other than 1 .* and 0"),
        (lambda t: t.assign(**{"ours, % of light": "fast"}), r"'ours, % of light' holds something other than numbers"),
        (lambda t: t.reset_index(drop=True), r"no column 'direction', 'dtype', 'N'"),
        (lambda t: t.assign(extra=1.0), r"column 'extra' is none of"),
        (lambda t: t.assign(**{"ours / Helion": "slow"}), r"'ours / Helion' holds something other than numbers"),
    ],
)
def test_a_file_that_breaks_the_contract_is_named(tmp_path, change, message):
    change(page_table()[[*COLUMNS, "recommended"]]).to_csv(tmp_path / "04_rms_norm.csv")
    with pytest.raises(ValueError, match=r"04_rms_norm\.csv.*" + message):
        sol_results.read_results(tmp_path)


def covered(rows):
    """{(op, direction, dtype): [N, ...]} over the recommendation rows, in their order."""
    found = {}
    for row in rows:
        found.setdefault((row["op"], row["direction"], row["dtype"]), []).extend(row["sizes"])
    return found


def test_recommendation_merges_consecutive_n_of_one_page():
    """The core page up to 16 K, the deep dive past it: two rows, every N once, in the order of N."""
    core_n, long_n = [256, 512, 1024, 2048, 4096, 8192, 16384], [32768, 65536]
    results = results_of(
        **{
            "01_softmax": sweep(
                "forward", "float32", core_n + [32768], [90, 91, 92, 93, 94, 95, 96, 50], 1.1, [1] * 7 + [0]
            ),
            "11_long_rows": sweep("forward", "float32", long_n, [88, 97], [1.2, 1.4], 1),
        }
    )
    rows, notes = sol_results.recommend(results)
    assert not notes
    assert [(r["stem"], r["sizes"], r["claimed"]) for r in rows] == [
        ("01_softmax", core_n, True),
        ("11_long_rows", long_n, True),
    ]
    assert (rows[0]["lowest"], rows[0]["best"], rows[0]["worst ratio"], rows[0]["median ratio"]) == (90, 96, 1.1, 1.1)
    assert covered(rows) == {("1", "forward", "float32"): core_n + long_n}
    text = sol_results.landing_rst(results, {s: PAGES[s] for s in results}, "on a test GPU.")
    assert "256 to 16,384 (7 points)" in text and "90% to 96%" in text and "32,768 to 65,536 (2 points)" in text
    assert ":doc:`11 Long rows <tutorials/deep_dives/11_long_rows>`" in text
    # the core page's own sweep: its row over its range is not dragged down by the N past it
    assert "forward, float32, past its range: see :doc:`11 Long rows" in text
    assert text.index("Which kernel for your op and N") < text.index("Each page's sweep")


def test_two_pages_claiming_one_n_keep_the_faster_and_say_so():
    results = results_of(
        **{
            "02_layer_norm": sweep("backward", "bfloat16", [4096, 8192], [95, 21], 1.0, 1),
            "23_wide_backward": sweep("backward", "bfloat16", [8192, 16384], [90, 91], 1.3, 1),
        }
    )
    rows, notes = sol_results.recommend(results)
    assert [(r["stem"], r["sizes"], r["rivals"]) for r in rows] == [
        ("02_layer_norm", [4096], ()),
        ("23_wide_backward", [8192], ("02_layer_norm",)),
        ("23_wide_backward", [16384], ()),
    ]
    assert len(notes) == 1 and "02_layer_norm" in notes[0] and "23_wide_backward" in notes[0] and "8,192" in notes[0]
    text = sol_results.landing_rst(results, {s: PAGES[s] for s in results}, "on a test GPU.")
    assert "(also claimed by :doc:`02 Layer norm <tutorials/02_layer_norm>`, slower here)" in text
    # a claimant whose kernel did not run (NaN) loses to one that ran, whatever the page order
    results["02_layer_norm"].loc[1, "ours, % of light"], results["23_wide_backward"].loc[0, "ours, % of light"] = (
        99,
        NAN,
    )
    rows, _ = sol_results.recommend(results)
    assert [(r["stem"], r["sizes"], r["rivals"]) for r in rows][1] == ("02_layer_norm", [8192], ("23_wide_backward",))


def test_a_point_no_page_claims_names_the_best_measured_there():
    results = results_of(
        **{
            "02_layer_norm": sweep("forward", "float32", [16384, 65536], [97, 60], 1.0, [1, 0]),
            "02_layer_norm_locks": sweep("forward", "float32", [65536], 70, 0.9, 0),
        }
    )
    rows, notes = sol_results.recommend(results)
    assert [(r["stem"], r["sizes"], r["claimed"]) for r in rows] == [
        ("02_layer_norm", [16384], True),
        ("02_layer_norm_locks", [65536], False),
    ] and not notes
    text = sol_results.landing_rst(results, {s: PAGES[s] for s in results}, "on a test GPU.")
    assert "(the fastest measured: this N is outside every design's range)" in text
    # the core page's row past its range names that page, labelled the same way
    assert (
        "forward, float32, past its range: see :doc:`02 Layer norm locks <tutorials/02_layer_norm_locks>` "
        "(the fastest measured" in text
    )
    # past its range, several pages: each with its N; this page itself where none claims and it measured best
    results["02_layer_norm"] = results_of(
        x=sweep("forward", "float32", [16384, 32768, 65536], [97, 60, 80], 1.0, [1, 0, 0])
    )["x"]
    results["21_wide"] = results_of(x=sweep("forward", "float32", [32768], 95, 1.0, 1))["x"]
    text = sol_results.landing_rst(
        results, {s: PAGES.get(s, (f"tutorials/deep_dives/{s}", "Wide", True)) for s in results}, "on a test GPU."
    )
    assert (
        "forward, float32, past its range: see :doc:`21 Wide <tutorials/deep_dives/21_wide>` (N = 32,768), "
        "this page (N = 65,536) (the fastest measured: this N is outside every design's range)"
    ) in text


def test_missing_peers_and_a_gluon_kernel_that_did_not_run():
    """No peer: "no peer ran", never 0x or nan; a claimed point whose kernel did not run (a Gluon kernel without a
    GPU): the page stays recommended, "not measured", and its row does not merge with another page's."""
    results = results_of(
        **{
            "01_softmax": sweep("forward", "bfloat16", [4096, 16384, 65536], [80, 85, 40], NAN, [1, 1, 0]),
            "12_staged": sweep("forward", "bfloat16", [16384, 24576, 32768], NAN, NAN, [0, 1, 1]),
            "11_long_rows": sweep("forward", "bfloat16", [65536], 93, [1.1], 1),
        }
    )
    rows, _ = sol_results.recommend(results)
    assert [(r["stem"], r["sizes"]) for r in rows] == [
        ("01_softmax", [4096, 16384]),
        ("12_staged", [24576, 32768]),
        ("11_long_rows", [65536]),
    ]
    assert rows[0]["peer points"] == 0 and rows[1]["light points"] == 0
    text = sol_results.landing_rst(results, {s: PAGES[s] for s in results}, "on a test GPU.")
    cells = [line.split(" - ", 1)[1] for line in text.splitlines() if line.startswith(("   * - ", "     - "))]
    row_12 = cells[cells.index("24,576 to 32,768 (2 points)") - 2 :][:7]
    assert row_12[3].startswith(":doc:`12 Staged") and row_12[4:] == ["not measured", "-", "-"], row_12
    row_01 = cells[cells.index("4,096 to 16,384 (2 points)") - 2 :][:7]
    assert row_01[4:] == ["80% to 85%", "no peer ran", "-"], row_01
    assert "nan" not in text.lower()


def test_every_point_is_in_exactly_one_row():
    """Pages of two ops, several directions and dtypes, claims that overlap, gaps and NaN: each (op, direction,
    dtype, N) any page measured is in one row, which names a page and its numbers."""
    sizes = [2**k for k in range(8, 18)]
    results = results_of(
        **{
            "01_softmax": [
                p
                for d in ("forward", "backward")
                for t in ("float32", "bfloat16")
                for p in sweep(d, t, sizes[:8], [60 + k for k in range(8)], 1.0, [1] * 6 + [0] * 2)
            ],
            "11_long_rows": sweep("forward", "float32", sizes[5:], 90, NAN, 1)
            + sweep("backward", "bfloat16", sizes[7:], NAN, 1.2, 1),
            "12_staged": sweep("forward", "bfloat16", [20000, 32768], [95, NAN], 1.3, 1),
            "02_layer_norm": sweep("backward", "float32", sizes, 80, 0.9, [1] * 5 + [0] * 5),
            "23_wide_backward": sweep("backward", "float32", sizes[6:], 92, 1.1, 1),
        }
    )
    rows, notes = sol_results.recommend(results)
    measured = {}
    for stem, frame in results.items():
        for direction, dtype, n in frame[["direction", "dtype", "N"]].itertuples(index=False):
            measured.setdefault((sol_results.op_of(stem), direction, dtype), set()).add(n)
    found = covered(rows)
    assert {key: sorted(ns) for key, ns in measured.items()} == found, "a point missing, or in two rows"
    assert all(r["stem"] in results for r in rows)
    assert len(notes) == 1, notes  # 11 and 01 both claim fp32 forward 8192
    text = sol_results.landing_rst(results, {s: PAGES[s] for s in results}, "on a test GPU.")
    table = text[text.index("Which kernel") : text.index("Each page's sweep")]
    assert table.count("   * - ") == len(rows) + 1 and "nan" not in table.lower()


# ---- the targets a row misses, and what the hardware counters measured there ----


def rows_of(results):
    """{(stem, what): row} of the per-page table."""
    return {(stem, row["what"]): row for stem, row in sol_results.page_rows(results, sol_results.recommend(results)[0])}


LONG = [65536, 131072, 262144]


def test_a_row_misses_the_targets_it_falls_short_of():
    """One phrase per target missed, with its figure and where; a row that meets them all, or where ours was not
    measured, misses none; a row where no peer ran misses no ratio target."""
    results = results_of(
        **{
            "11_meets": sweep("forward", "float32", LONG, [95, 90, 99], [1.2, 0.97, 1.0], 1),
            "11_light": sweep("forward", "float32", LONG, [95, 84.5, 91], 1.1, 1),
            "11_worst": sweep("forward", "float32", LONG, 95, [1.2, 0.879, 1.1], 1),
            "11_median": sweep("forward", "float32", LONG, 95, [0.98, 0.99, 1.5], 1),
            "11_all": sweep("forward", "float32", LONG, [88, 84.5, 91], [0.883, 0.879, 0.95], 1),
            "11_no_peer": sweep("forward", "float32", LONG, [95, 80, 99], NAN, 1)
            + sweep("backward", "float32", LONG, 95, NAN, 1),
            "11_not_run": sweep("forward", "float32", LONG, NAN, NAN, 1),
        }
    )
    missed = {
        stem: sol_results.missed_targets(stem, row) for (stem, _), row in rows_of(results).items() if "forward" in _
    }
    assert missed == {
        "11_meets": [],
        "11_light": ["lowest 84.5% of light (N = 131,072), under 90%"],
        "11_worst": ["worst 0.879x the best peer (N = 131,072), under 0.97x"],
        "11_median": ["median 0.99x, under 1x"],
        "11_all": [
            "lowest 84.5% of light (N = 131,072), under 90%",
            "worst 0.879x the best peer (N = 131,072), under 0.97x",
            "median 0.883x, under 1x",
        ],
        "11_no_peer": ["lowest 80% of light (N = 131,072), under 90%"],
        "11_not_run": [],
    }
    assert sol_results.missed_targets("11_no_peer", rows_of(results)["11_no_peer", "backward, float32"]) == []


def test_a_row_under_helions_target_misses_it_wherever_it_ran(tmp_path):
    """A page that measured Helion writes ours / Helion beside its columns: the build reads it, and a row whose worst
    point is under 0.98x Helion's kernel misses that target, named with its figure and N, even where every other
    target is met (Helion slower than a faster peer); points where Helion did not run, and pages without the column,
    miss nothing of it. The landing page lists such a row with the counters measured at its N."""
    table = page_table()[[*COLUMNS, "recommended"]].assign(recommended=1, **{"ours, % of light": 97.0})
    table = table.assign(**{"ours / best peer": 1.01, "ours / Helion": [0.975, NAN, 1.2, 0.99, 1.3, NAN]})
    table.to_csv(tmp_path / "01_fused_softmax.csv")
    table.drop(columns="ours / Helion").to_csv(tmp_path / "04_rms_norm.csv")
    found = sol_results.read_results(tmp_path)
    assert "ours / Helion" in found["01_fused_softmax"] and "ours / Helion" not in found["04_rms_norm"]
    rows = rows_of(found)
    assert sol_results.missed_targets("01_fused_softmax", rows["01_fused_softmax", "forward, float32"]) == [
        "worst 0.975x Helion's tuned kernel (N = 256), under 0.98x"
    ]
    assert sol_results.missed_targets("01_fused_softmax", rows["01_fused_softmax", "backward, float32"]) == []
    assert sol_results.missed_targets("04_rms_norm", rows["04_rms_norm", "forward, float32"]) == []
    counters = {"points": [{"page": "01_fused_softmax", "direction": None, "dtype": "float32", "N": 256, "calls": []}]}
    text = "\n".join(
        sol_results._misses_section(
            list(sol_results.page_rows(found, sol_results.recommend(found)[0])),
            lambda stem: stem,
            counters,
            "a test GPU",
        )
    )
    assert "Helion's kernel ran, ours at least 0.98x its speed" in text and "- N = 256: no call measured" in text, text
    assert "worst 0.975x Helion's tuned kernel (N = 256), under 0.98x" in text, text


def test_a_core_page_inside_its_range_has_the_higher_floor():
    """92% misses on a core page inside its range, not on a deep dive nor past the core page's range; a figure that
    would round to the floor is shown with the digits that keep it under."""
    results = results_of(
        **{
            "01_softmax": sweep("forward", "float32", [1024, 4096, 65536], [95, 92, 92], 1.1, [1, 1, 0]),
            "11_long_rows": sweep("forward", "float32", [1024, 4096, 65536], [95, 92, 92], 1.1, 0),
            "02_layer_norm": sweep("forward", "float32", [1024, 4096], [95, 92.96], 1.1, 1),
        }
    )
    rows = rows_of(results)
    assert set(rows) == {
        ("01_softmax", "forward, float32"),
        ("01_softmax", "forward, float32, past its range"),
        ("11_long_rows", "forward, float32"),
        ("02_layer_norm", "forward, float32"),
    }
    assert sol_results.missed_targets("01_softmax", rows["01_softmax", "forward, float32"]) == [
        "lowest 92% of light (N = 4,096), under 93%"
    ]
    assert sol_results.missed_targets("01_softmax", rows["01_softmax", "forward, float32, past its range"]) == []
    assert sol_results.missed_targets("11_long_rows", rows["11_long_rows", "forward, float32"]) == []
    assert sol_results.missed_targets("02_layer_norm", rows["02_layer_norm", "forward, float32"]) == [
        "lowest 92.96% of light (N = 4,096), under 93%"
    ]


def call(label, kernels, us, dram_pct, warps_active_pct, waves, x_times=2.0):
    """A call of a counted point, its x 128 MiB."""
    return {
        "label": label,
        "kernels": kernels,
        "us": us,
        "dram_bytes": round(x_times * 2**27),
        "x_bytes": 2**27,
        "dram_pct": dram_pct,
        "warps_active_pct": warps_active_pct,
        "waves": waves,
    }


def counters_for(*points):
    return {"measured": "2026-11-30", "ncu": "2025.3.1.0", "points": list(points)}


def point(page, direction, dtype, n, calls):
    return {"page": page, "direction": direction, "dtype": dtype, "N": n, "calls": calls}


FULL = [
    call("torch", 3, 90.0, 70.0, 50.0, 4.0, x_times=4.0),
    call("copy kernel", 1, 40.0, 92.0, 80.0, 8.0),
    call("quack", 1, 41.2, 93.0, 60.1, 1.0),
    call("Liger", 1, 55.5, 88.0, 40.0, 2.0),
    call("ours", 2, 48.1, 85.2, 45.0, 1.9, x_times=268500000 / 2**27),
    call("torch.compile", 2, 60.0, 80.0, 30.0, 1.5),
]


def test_a_counted_point_in_one_line():
    """Ours first with what each figure is, then at most three other calls (not "naive"), the fastest first, the copy
    kernel last (its time and DRAM busy only); a figure the file lacks or holds as null is "-"."""
    assert sol_results.counters_line(point("11_long_rows", "forward", "bfloat16", 131072, FULL)) == (
        "N = 131,072: ours 2 kernels, 48.1 us, 2.00x x's bytes in DRAM, DRAM 85% busy, 45% warps active, 1.9 waves; "
        "quack 1 kernel, 41.2 us, 2.00x, 93%, 60%, 1 wave; Liger 1 kernel, 55.5 us, 2.00x, 88%, 40%, 2 waves; "
        "torch.compile 2 kernels, 60 us, 2.00x, 80%, 30%, 1.5 waves; copy kernel 40 us, 92% busy. Reading: quack "
        "runs 1.17x as fast here: ours launches 2 kernels, quack 1; with as many bytes, ours keeps DRAM 85% busy, "
        "quack 93%."
    )
    sparse = [
        {"label": "quack", "us": 41.2, "kernels": None},
        {"label": "ours", "kernels": 2, "dram_bytes": 2**28},
        {"label": "copy kernel"},
        {"label": "torch", "us": 1234.4, "waves": 312.0},
        {"label": "naive", "us": 1.0},  # the unfused baseline: never shown, however fast
    ]
    assert sol_results.counters_line(point("11_long_rows", None, "bfloat16", 4096, sparse)) == (
        "N = 4,096: ours 2 kernels, - us, - x's bytes in DRAM, DRAM - busy, - warps active, - waves; "
        "quack - kernels, 41.2 us, -, -, -, - waves; torch - kernels, 1234 us, -, -, -, 312 waves; "
        "copy kernel - us, - busy"
    )


def test_a_counted_points_reading_names_only_differences_past_their_noise():
    """Against the fastest other call where it beat ours, else the copy kernel: more kernels, 5% more DRAM bytes, DRAM
    3 points less busy, each where measured; a peer that won with none of those is said to be told apart by none."""
    reading = sol_results.reading
    ours = call("ours", 1, 100.0, 60.0, 40.0, 1.0)
    assert reading(ours, call("quack", 1, 80.0, 75.0, 40.0, 1.0), None) == (
        "Reading: quack runs 1.25x as fast here: with as many bytes, ours keeps DRAM 60% busy, quack 75%."
    )
    assert reading(
        call("ours", 4, 100.0, 80.0, 40.0, 1.0, x_times=3.0), call("Liger", 1, 90.0, 78.0, 40.0, 1.0), None
    ) == (
        "Reading: Liger runs 1.11x as fast here: ours launches 4 kernels, Liger 1; ours moves 1.50x Liger's DRAM bytes."
    )
    assert reading(ours, call("torch", 1, 99.0, 62.0, 40.0, 1.0, x_times=2.05), None) == (
        "Reading: torch runs 1.01x as fast here; no counter here tells them apart."
    )
    copy = call("copy kernel", 1, 70.0, 85.0, 80.0, 8.0)
    slower = call("torch", 2, 150.0, 50.0, 40.0, 1.0)
    assert reading(ours, slower, copy) == "Reading: against the copy kernel: ours keeps DRAM 60% busy, copy kernel 85%."
    backward = call("ours", 1, 100.0, 84.0, 40.0, 1.0, x_times=3.0)  # y, dy, dx: its bytes are no copy's
    assert reading(backward, None, copy) == "", "a backward's bytes compared with a copy's"
    assert reading(call("ours", 1, 100.0, 84.0, 40.0, 1.0), None, copy) == ""  # nothing past its noise
    assert reading({"label": "ours"}, {"label": "quack", "us": 41.2}, {"label": "copy kernel"}) == ""
    assert reading(ours, None, None) == ""


def test_a_reading_names_the_warps_an_sm_holds_where_ours_holds_a_quarter_fewer_than_the_faster_peer():
    """From ncu's waves (a grid over SMs x the blocks an SM holds at once) and the GPU's SM count: the warps an SM holds
    of each call's longest kernel, said with each kernel's registers a thread where ours holds a quarter fewer than
    the peer that beat it; never against the copy kernel, nor without the SM count."""
    reading, sms = sol_results.reading, 132

    def launch(label, us, grid, per_sm, block, registers):
        return call(label, 1, us, 80.0, 50.0, grid / (sms * per_sm)) | dict(grid=grid, block=block, registers=registers)

    ours = launch("ours", 64.0, 32768, 12, 128, 40)  # 12 blocks of 4 warps an SM
    quack = launch("quack", 62.0, 32768, 16, 128, 31)
    assert sol_results.warps_an_sm(ours, sms) == 48 and sol_results.warps_an_sm(quack, sms) == 64
    assert reading(ours, quack, None, sms) == (
        "Reading: quack runs 1.03x as fast here: an SM holds 48 warps of ours (40 registers a thread), 64 of quack's "
        "(31 registers a thread)."
    )
    assert reading(ours, quack, None) == "Reading: quack runs 1.03x as fast here; no counter here tells them apart."
    nearly = launch("quack", 62.0, 32768, 15, 128, 32)  # 60 warps: 48 is more than three quarters of it
    assert (
        reading(ours, nearly, None, sms) == "Reading: quack runs 1.03x as fast here; no counter here tells them apart."
    )
    copy = launch("copy kernel", 50.0, 65536, 16, 128, 16)
    assert "warps" not in reading(ours, None, copy, sms)
    unmeasured = {key: value for key, value in quack.items() if key != "grid"}
    assert "warps" not in reading(ours, unmeasured, None, sms)


def misses_table(text):
    """The rows of the table of misses, each a list of its cells' reST (a cell's paragraphs joined by a newline)."""
    section = text[text.index("Where a row misses a target") :]
    assert section.count(".. list-table::") == 1, section
    rows = []
    for line in section[section.index(".. list-table::") :].splitlines()[4:]:
        if line.startswith("   * - "):
            rows.append([line[7:]])
        elif line.startswith("     - "):
            rows[-1].append(line[7:])
        elif line.startswith("       "):
            rows[-1][-1] += "\n" + line[7:]
        elif line and not line.startswith(" "):
            break
    return rows


def parsed(text):
    """The reST as docutils reads it, Sphinx's :doc: links as plain interpreted text; any warning fails."""
    import docutils.core

    return docutils.core.publish_doctree(
        text.replace(":doc:`", "`"), settings_overrides={"report_level": 2, "halt_level": 2, "warning_stream": False}
    )


SWEEPS = {
    "11_long_rows": sweep("forward", "bfloat16", LONG, [95, 84.5, 91], [1.1, 0.879, 1.0], 1)
    + sweep("backward", "bfloat16", LONG, [95, 85, 91], 1.1, 1)
    + sweep("forward", "float32", LONG, 95, 1.1, 1),
    "12_staged": sweep("forward", "bfloat16", [8192, 16384], [80, 95], 1.2, 1),
}


def test_the_section_of_misses_without_counters():
    """A row per row that misses a target, what it missed; no counters stored for the GPU: one sentence says so, and
    the table has no column for them. No row that misses: one sentence, no table."""
    results = results_of(**SWEEPS)
    text = sol_results.landing_rst(
        results, {s: PAGES.get(s, PAGES["11_long_rows"]) for s in results}, "on a GPU.", gpu="NVIDIA H200"
    )
    assert text.index("Each page's sweep") < text.index("Where a row misses a target")
    assert "No hardware counters are stored for NVIDIA H200: ``dev/counters.py``" in text
    rows = misses_table(text)
    assert rows[0] == ["page", "measured", "what it missed"]
    assert [row[1:] for row in rows[1:]] == [
        [
            "forward, bfloat16",
            "lowest 84.5% of light (N = 131,072), under 90%; worst 0.879x the best peer (N = 131,072), under 0.97x",
        ],
        ["backward, bfloat16", "lowest 85% of light (N = 131,072), under 90%"],
        ["forward, bfloat16", "lowest 80% of light (N = 8,192), under 90%"],
    ]
    parsed(text)
    met = results_of(x=sweep("forward", "bfloat16", LONG, 95, 1.1, 1))
    text = sol_results.landing_rst({"11_long_rows": met["x"]}, PAGES, "on a GPU.", gpu="NVIDIA H200")
    section = text[text.index("Where a row misses a target") :]
    assert "Every row meets them." in section and "list-table" not in section and "counters" not in section


def test_a_page_the_counters_cannot_reach_says_so_where_it_misses(monkeypatch):
    """A page whose calls dev/counters.py cannot profile (62's ranks) gets its reason in the counters' cell, not
    "no counters measured yet"."""
    monkeypatch.setitem(sol_results.NOT_COUNTED, "12_staged", "not counted: its ranks run apart")
    counters = counters_for(point("11_long_rows", "forward", "bfloat16", 131072, FULL))
    results = results_of(**SWEEPS)
    pages = {s: PAGES.get(s, PAGES["11_long_rows"]) for s in results}
    rows = misses_table(sol_results.landing_rst(results, pages, "on a GPU.", counters=counters, gpu="NVIDIA H200"))
    cells = [row[3] for row in rows[1:]]  # 11's rows, then 12's
    assert cells[-1] == "not counted: its ranks run apart" and cells[-2] == "no counters measured yet at this row's N"
    assert "62_cross_entropy_vocab_parallel" in sol_results.NOT_COUNTED


def test_the_section_of_misses_with_counters():
    """Beside each row that misses, the counted points of its page, dtype and direction (a point without one: any)
    at its N, a paragraph each in the order of N; none: "no counters measured yet at this row's N"."""
    counters = counters_for(
        point("11_long_rows", None, "bfloat16", 262144, [call("ours", 1, 90.0, 91.0, 50.0, 1.0)]),
        point("11_long_rows", "forward", "bfloat16", 131072, FULL),
        point("11_long_rows", "backward", "bfloat16", 65536, [call("ours", 3, 30.0, 60.0, 20.0, 0.5)]),
        point("11_long_rows", "forward", "float32", 131072, [call("ours", 4, 1.0, 1.0, 1.0, 1.0)]),  # another dtype
        point("11_long_rows", "forward", "bfloat16", 4096, [call("ours", 5, 1.0, 1.0, 1.0, 1.0)]),  # another N
        point("12_staged", "backward", "bfloat16", 8192, [call("ours", 6, 1.0, 1.0, 1.0, 1.0)]),  # another direction
    )
    results = results_of(**SWEEPS)
    pages = {s: PAGES.get(s, PAGES["11_long_rows"]) for s in results}
    text = sol_results.landing_rst(results, pages, "on a GPU.", counters=counters, gpu="NVIDIA H200")
    assert (
        "Nsight Compute's counters (``ncu`` 2025.3.1.0), measured on NVIDIA H200 on 2026-11-30 by ``dev/counters.py``"
    ) in text and "No hardware counters" not in text
    counters["ncu"] = "Version 2025.3.1.0 (build 36398880) (public-release)"  # as ncu --version prints it
    assert "(``ncu`` 2025.3.1.0)" in sol_results.landing_rst(results, pages, "on a GPU.", counters=counters, gpu="G")
    rows = misses_table(text)
    assert rows[0][3] == "what the counters say"
    forward, backward, staged = (row[3].split("\n") for row in rows[1:])
    assert forward == [
        sol_results.counters_line(counters["points"][1]),
        "N = 262,144: ours 1 kernel, 90 us, 2.00x x's bytes in DRAM, DRAM 91% busy, 50% warps active, 1 wave",
    ]
    assert backward == [
        "N = 65,536: ours 3 kernels, 30 us, 2.00x x's bytes in DRAM, DRAM 60% busy, 20% warps active, 0.5 waves",
        "N = 262,144: ours 1 kernel, 90 us, 2.00x x's bytes in DRAM, DRAM 91% busy, 50% warps active, 1 wave",
    ]
    assert staged == ["no counters measured yet at this row's N"]
    # docutils reads the cell of two points as two paragraphs, and each row with its four cells
    tables = [t for t in parsed(text).findall(lambda n: n.tagname == "table") if "sol-misses" in t["classes"]]
    (table,) = tables
    body = [row for row in table.findall(lambda n: n.tagname == "row")][1:]
    assert [len(row.children) for row in body] == [4, 4, 4]
    paragraphs = [p.astext() for p in body[0].children[3].findall(lambda n: n.tagname == "paragraph")]
    assert paragraphs == forward


def test_read_counters_gives_this_gpus_or_none(tmp_path):
    path = tmp_path / "counters.json"
    entry = counters_for(point("11_long_rows", None, "bfloat16", 4096, FULL))
    assert sol_results.read_counters(str(path), "NVIDIA H200") is None  # no file
    path.write_text(json.dumps({"NVIDIA H200": entry}))
    assert sol_results.read_counters(str(path), "NVIDIA H200") == entry
    assert sol_results.read_counters(str(path), "NVIDIA B200") is None
    assert sol_results.read_counters(str(path), None) is None  # no GPU
    del entry["points"][0]["N"]
    path.write_text(json.dumps({"NVIDIA H200": entry}))
    with pytest.raises(ValueError, match=r"counters\.json: a point of 'NVIDIA H200' without its N"):
        sol_results.read_counters(str(path), "NVIDIA H200")


@pytest.mark.parametrize("path", WRITERS, ids=lambda p: p.stem)
def test_each_page_writes_under_its_own_name_only_when_asked(path):
    """The block names the page's own file, and runs only where the build set SOL_RESULTS."""
    text = path.read_text(encoding="utf-8")
    names = re.findall(r'os\.environ\["SOL_RESULTS"\], "([^"]+)"\)', text)
    assert names == [f"{path.stem}.csv"], f"{path.name} writes {names}, expected [{path.stem}.csv]"
    block = text[text.index('if os.environ.get("SOL_RESULTS"):') :]
    assert block.index("SOL_RESULTS") < block.index(".to_csv("), "the write is not under the SOL_RESULTS guard"
    assert text.count("SOL_RESULTS") == 2, f"{path.name} uses SOL_RESULTS outside its one block"


def range_of(path):
    """A page's RANGE: its source run up to the statement that sets it (its constants and configs; nothing timed)."""
    source = path.read_text(encoding="utf-8")
    (node,) = [n for n in ast.parse(source).body if isinstance(n, ast.Assign) and ast.unparse(n.targets) == "RANGE"]
    scope = {"__name__": f"range_of_{path.stem}", "__file__": str(path)}
    if path.stem in SHOWN_NOT_RUN:  # its imports need a newer JAX: its RANGE alone (which must then stand alone)
        exec(compile(ast.Module([node], []), str(path), "exec"), scope)
    else:
        exec(compile("\n".join(source.splitlines()[: node.end_lineno]), str(path), "exec"), scope)
    return scope["RANGE"]


@pytest.fixture(scope="module")
def ranges():
    return {path.stem: range_of(path) for path in WRITERS}


@pytest.mark.parametrize("path", WRITERS, ids=lambda p: p.stem)
def test_each_page_writes_recommended_from_its_range(path, ranges):
    """recommended is the page's one RANGE constant, (direction, dtype) -> the N its design is for (a range of
    N, step 1), read in its results block (the columns themselves: test_the_built_sites_results_keep_the_contract)."""
    text = path.read_text(encoding="utf-8")
    block = text[text.index('if os.environ.get("SOL_RESULTS"):') :]
    block = block[: block.index('.csv"))') + 7]
    assert re.search(r"recommended=\[\s*int\(n in RANGE\.get\(", block), (
        f"{path.name}: recommended is not read from RANGE"
    )
    assert len(re.findall(r"^RANGE = ", text, re.M)) == 1, f"{path.name}: RANGE should be set once"
    for (direction, dtype), sizes in ranges[path.stem].items():
        assert isinstance(direction, str) and dtype in ("float32", "bfloat16", "float16"), (
            f"{path.name}: {(direction, dtype)}"
        )
        assert isinstance(sizes, range) and sizes.step == 1 and 1 <= sizes.start < sizes.stop, f"{path.name}: {sizes}"


def test_no_two_pages_claim_one_point(ranges):
    """Across the pages of one op, no two RANGEs share a direction, dtype and N (the landing page settles a tie, but
    the pages should agree), and the core page's range starts at the smallest N."""
    for op in sorted({sol_results.op_of(stem) for stem in ranges}):
        stems = [stem for stem in ranges if sol_results.op_of(stem) == op]
        for key in {key for stem in stems for key in ranges[stem]}:
            claims = sorted((ranges[s][key].start, ranges[s][key].stop, s) for s in stems if key in ranges[s])
            for (_, stop, first), (start, _, second) in zip(claims, claims[1:]):
                assert stop <= start, f"{first} and {second} both claim {key} at N = {start} to {stop - 1}"
        core = min(stems)
        assert ranges[core] and all(r.start == 1 for r in ranges[core].values()), (
            f"{core}'s range should start at N = 1"
        )


def test_the_pages_that_write_results():
    """Every page with peers writes its results; 13 and 05's sharded page (one device against several) have none."""
    wanted = {
        "01_fused_softmax",
        "01_softmax_backward",
        "02_layer_norm",
        "02_layer_norm_backward",
        "24_layer_norm_backward_locks",
        "03_parallel_reduction",
        "03_sum_of_all_elements",
        "04_rms_norm",
        "04_rms_norm_backward",
        "04_rms_norm_operator",
        "05_jax_rms_norm",
        "05_jax_rms_norm_backward",
        "06_cross_entropy",
        "06_cross_entropy_backward",
        "11_softmax_long_rows",
        "61_cross_entropy_split_rows",
        "12_softmax_staged_gluon",
        "21_layer_norm_wide_forward",
        "22_layer_norm_staged_gluon",
        "23_layer_norm_wide_backward",
        "31_reduction_rows_and_columns",
        "41_rms_norm_wide_backward",
        "42_rms_norm_staged_gluon",
        "51_rms_norm_mosaic_gpu",
        "52_rms_norm_mosaic_gpu_backward",
    }
    assert wanted <= {p.stem for p in WRITERS}
    assert not {"13_launch_heuristics", "05_jax_rms_norm_sharded"} & {p.stem for p in WRITERS}


def test_no_two_pages_share_a_short_title():
    """The landing page names a page by its title up to a colon: two pages whose titles differ only after it (a
    forward page and its backward page) would read as one there."""
    shorts = [title for _, title, _ in sol_results._pages(ROOT / "tutorials").values()]
    assert len(shorts) == len(set(shorts)), sorted(t for t in shorts if shorts.count(t) > 1)


# ---- the build's handlers, on a made-up tree: a page, its generated .rst, and this build's results ----


def fake_build(tmp_path, plot=True):
    """(app, the page's generated .rst): a confdir with tutorials/01_demo.py, a srcdir docs/, an outdir."""
    (tmp_path / "tutorials").mkdir(exist_ok=True)
    (tmp_path / "tutorials" / "01_demo.py").write_text(
        '"""\nDemo: a page\n============\n\nIt measures."""\nimport os\nos.environ.get("SOL_RESULTS")\n'
    )
    rst = tmp_path / "docs" / "tutorials" / "01_demo.rst"
    rst.parent.mkdir(parents=True, exist_ok=True)
    app = types.SimpleNamespace(
        outdir=str(tmp_path / "build" / "html"),
        srcdir=str(tmp_path / "docs"),
        confdir=str(tmp_path),
        config=types.SimpleNamespace(sphinx_gallery_conf={"plot_gallery": plot}),
    )
    return app, rst


def run_build(app, rst, writes):
    """The build's order: the results folder is set up, sphinx-gallery runs the page (writes results, makes
    its .rst) or skips it, then the landing page's files are written. Returns the landing page's reST."""
    sol_results._ask_for_results(app)
    if writes:
        page_table()[[*COLUMNS, "recommended"]].to_csv(os.path.join(os.environ["SOL_RESULTS"], "01_demo.csv"))
    if writes is not None:  # None: sphinx-gallery skipped the page (unchanged), leaving its .rst as it was
        rst.write_text("the page\n")
        kept = pathlib.Path(app.srcdir) / "_generated" / "results" / "01_demo.csv"
        if kept.exists():  # made after the kept results, as in a real build (seconds later, whatever the clock's grain)
            later = kept.stat().st_mtime_ns + 10**9
            os.utime(rst, ns=(later, later))
    sol_results._write_landing_results(app)
    return (pathlib.Path(app.srcdir) / "_generated" / sol_results.INCLUDE).read_text()


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("SOL_RESULTS", raising=False)


def test_build_shows_what_ran_keeps_what_was_not_rerun_and_drops_what_went_stale(tmp_path, clean_env):
    app, rst = fake_build(tmp_path)
    # 1. the page ran and wrote its results: a table row linking to it, and the figure
    text = run_build(app, rst, writes=True)
    assert ":doc:`01 Demo <tutorials/01_demo>`" in text and "forward, float32" in text
    assert (
        f"/_generated/{sol_results.FIGURE}" in text and (tmp_path / "docs" / "_generated" / sol_results.FIGURE).exists()
    )
    assert os.environ["SOL_RESULTS"] == str(tmp_path / "build" / "results")
    # 2. sphinx-gallery skipped the unchanged page: its page and these numbers are still one run's
    text = run_build(app, rst, writes=None)
    assert "forward, float32" in text and "Not rerun by this build" in text
    assert not (tmp_path / "build" / "results" / "01_demo.csv").exists(), "last build's results were not cleared"
    # 3. the page was made again without results: the old numbers no longer match it, and are gone
    text = run_build(app, rst, writes=False)
    assert text.startswith("No results were measured in this build"), text
    assert not (tmp_path / "docs" / "_generated" / "results" / "01_demo.csv").exists()


def test_a_build_cut_short_and_run_again_keeps_the_pages_that_ran(tmp_path, clean_env):
    """A build stopped before its end (a time limit) wrote no landing page and kept nothing; the next build, which
    sphinx-gallery lets skip the pages that ran, still shows their numbers. A page stopped in its run (results
    written, its .rst not made after them) is not kept."""
    app, rst = fake_build(tmp_path)
    sol_results._ask_for_results(app)  # the build cut short: the page ran and its .rst was made, then no end
    page_table()[[*COLUMNS, "recommended"]].to_csv(os.path.join(os.environ["SOL_RESULTS"], "01_demo.csv"))
    fresh = tmp_path / "build" / "results" / "01_demo.csv"
    rst.write_text("the page\n")
    ran, made = fresh.stat().st_mtime_ns - 3 * 10**9, fresh.stat().st_mtime_ns - 2 * 10**9  # the results, then the page
    os.utime(fresh, ns=(ran, ran))
    os.utime(rst, ns=(made, made))
    text = run_build(app, rst, writes=None)
    assert "forward, float32" in text and "Not rerun by this build" in text, text
    # cut short again, inside the page's run this time: its results are newer than its .rst
    sol_results._ask_for_results(app)
    page_table()[[*COLUMNS, "recommended"]].to_csv(os.path.join(os.environ["SOL_RESULTS"], "01_demo.csv"))
    os.utime(rst, ns=(ran, ran))
    (tmp_path / "docs" / "_generated" / "results" / "01_demo.csv").unlink()
    text = run_build(app, rst, writes=None)
    assert text.startswith("No results were measured in this build"), text


def test_kept_results_of_an_older_contract_are_dropped_not_fatal(tmp_path, clean_env, caplog):
    """A page not rerun whose kept results lack a column the contract now asks for: dropped, and said in the log
    (not a Sphinx warning: -W would fail the build over a file that no page will write again)."""
    caplog.set_level("INFO", logger="sphinx")
    app, rst = fake_build(tmp_path)
    run_build(app, rst, writes=True)
    kept = tmp_path / "docs" / "_generated" / "results" / "01_demo.csv"
    pd.read_csv(kept).drop(columns="recommended").to_csv(kept, index=False)
    text = run_build(app, rst, writes=None)
    assert text.startswith("No results were measured in this build"), text
    assert not kept.exists() and "kept results dropped" in caplog.text
    assert not [r for r in caplog.records if r.levelname == "WARNING"], "a Sphinx warning fails a -W build"


def test_a_build_that_runs_no_tutorial_shows_no_numbers(tmp_path, clean_env):
    """html-noplot: one line, never numbers, even where an earlier build left some; SOL_RESULTS unset."""
    app, rst = fake_build(tmp_path)
    run_build(app, rst, writes=True)
    app.config.sphinx_gallery_conf["plot_gallery"] = False
    text = run_build(app, rst, writes=None)
    assert text == (
        "No results were measured in this build: it did not run the tutorials (``make html-noplot``). "
        "Each page's own tables hold its numbers, where a build ran it.\n"
    )
    assert "SOL_RESULTS" not in os.environ


def test_build_shows_the_counters_the_file_holds_for_its_gpu(tmp_path, clean_env, monkeypatch, caplog):
    """The build reads the file SOL_COUNTERS names, for the GPU it ran on; a file that breaks its format is a
    Sphinx warning (so that -W fails the build), and the section then says no counters are stored."""
    app, rst = fake_build(tmp_path)
    monkeypatch.setattr(sol_results, "_gpu", lambda: "NVIDIA H200")
    counters = tmp_path / "counters.json"
    # the demo page's forward inside its range: 50% at N = 256, under the core page's floor
    entry = counters_for(point("01_demo", "forward", "float32", 256, [call("ours", 1, 12.5, 40.0, 25.0, 0.3)]))
    counters.write_text(json.dumps({"NVIDIA H200": entry, "NVIDIA B200": counters_for()}))
    monkeypatch.setenv("SOL_COUNTERS", str(counters))
    text = run_build(app, rst, writes=True)
    assert "measured on NVIDIA H200 on 2026-11-30" in text
    assert "N = 256: ours 1 kernel, 12.5 us, 2.00x x's bytes in DRAM, DRAM 40% busy, 25% warps active" in text
    entry["points"][0]["calls"][0]["label"] = ""
    counters.write_text(json.dumps({"NVIDIA H200": entry}))
    caplog.set_level("WARNING", logger="sphinx")
    text = run_build(app, rst, writes=True)
    assert "No hardware counters are stored for NVIDIA H200" in text and "N = 256: ours" not in text
    assert "counters.json: a call without its label at 01_demo, N = 256" in caplog.text


# ---- the site the session built ----


def landing_section(built_site):
    landing = html.unescape((built_site / "html" / "index.html").read_text(encoding="utf-8"))
    start = landing.index('id="what-this-build-measured"')  # after the reading path, up to the tables of contents
    end = landing.find('class="toctree-wrapper', start)
    return landing[start : end if end > 0 else len(landing)]


def test_landing_page_shows_the_table_and_figure_of_this_build(built_site):
    section = landing_section(built_site)
    assert "No results were measured" not in section, "the build ran the tutorials but shows no results"
    for path in (p for p in WRITERS if p.stem not in SHOWN_NOT_RUN):
        where = path.relative_to(ROOT / "tutorials").with_suffix("").as_posix()
        assert f'href="tutorials/{where}.html' in section, f"no row links to {path.stem}"
    image = re.search(r'<img[^>]+src="(_images/landing_results[^"]*\.png)"', section)
    assert image, "no figure in the landing page's results"
    assert (built_site / "html" / image.group(1)).stat().st_size > 10_000
    assert re.search(r"<td><p>[\d.]+(e-\d+)?% \(N = [\d,]+\)</p></td>", section), "no % of light in the table"
    import torch

    if not torch.cuda.is_available():
        assert "NOT GPU timings" in section, "a CPU build's landing page must say its timings are not GPU timings"


# the results the landing page of the last build used: this build's, and those kept for pages it did not rerun
USED = ROOT / "docs" / "_generated" / "results"


def test_the_built_sites_results_keep_the_contract(built_site):
    """Every page that writes results has them on the landing page, with the contract's columns (read_results
    checks them: direction, dtype, N, the two metrics, recommended as 1 or 0)."""
    import torch

    found = sol_results.read_results(USED)
    wanted = {p.stem for p in WRITERS} - SHOWN_NOT_RUN - (set() if torch.cuda.is_available() else SPAWNING)
    assert set(found) == wanted, f"results from {sorted(found)}"
    assert not found["24_layer_norm_backward_locks"]["recommended"].any(), "02's design 2 is recommended on page 02"


def test_landing_page_recommends_a_page_for_every_point(built_site):
    """The recommendation table comes first, a row per run of N with one answer, each naming a page; every point
    of this build's results is in one row."""
    section = landing_section(built_site)
    first, then = section.index('id="which-kernel-for-your-op-and-n"'), section.index('id="each-page-s-sweep"')
    table = section[first:then]
    rows, _ = sol_results.recommend(sol_results.read_results(USED))
    body = re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)[1:]
    assert len(body) == len(rows), f"{len(body)} rows in the table, {len(rows)} recommended"
    for row, html_row in zip(rows, body):
        assert row["direction"] in html_row and row["dtype"] in html_row, html_row
        where = f"tutorials/{'' if row['stem'][0] == '0' else 'deep_dives/'}{row['stem']}.html"
        assert f'href="{where}' in html_row, f"the row for {row['sizes']} does not link to {where}"
    assert {sol_results.OPS[r["op"]] for r in rows} == set(sol_results.OPS.values())
    points = sum(len(r["sizes"]) for r in rows)
    total = sum(int(n) for n in re.findall(r"\((\d+) points?\)", table))
    assert total == points, f"the table's rows hold {total} points, the results {points}"


def test_execution_times_page_says_what_its_memory_column_holds(built_site):
    import torch

    times = html.unescape((built_site / "html" / "sg_execution_times.html").read_text(encoding="utf-8"))
    assert "The memory column:" in times
    # sphinx-gallery writes a time as mm:ss.mmm, but rounds 999.5 ms and up to "1000": four digits
    pattern = r"(\d\d_\w+)\.py</span></code>\)</p></td>\s*<td><p>\d+:\d\d\.\d+</p></td>\s*<td><p>([\d.]+)</p></td>"
    memory = {stem: float(m) for stem, m in re.findall(pattern, times)}
    assert len(memory) >= len(TUTORIALS), f"the execution-times page lists {len(memory)} memory figures"
    if torch.cuda.is_available():
        assert all(m > 0 for stem, m in memory.items() if stem not in SPAWNING), f"a page shows no GPU memory: {memory}"
    else:
        assert "no GPU memory was measured" in times


def test_the_stored_counters_keep_their_format_and_name_real_pages():
    """docs/counters.json (dev/counters.py's output, which the build names in SOL_COUNTERS): every GPU's entry reads
    back through read_counters, and each point names a page that writes results, at a dtype and N it could sweep, and
    holds a call of ours."""
    path = ROOT / "docs" / "counters.json"
    if not path.exists():
        pytest.skip("no counters stored")
    import json

    stems = {p.stem for p in (ROOT / "tutorials").rglob("[0-9][0-9]_*.py")}
    for gpu in json.loads(path.read_text()):
        entry = sol_results.read_counters(str(path), gpu)
        assert entry and entry["points"], gpu
        for point in entry["points"]:
            assert point["page"] in stems, point["page"]
            assert point["dtype"] in ("float32", "bfloat16", "float16") and point["N"] >= 1, point
            labels = [c["label"] for c in point["calls"]]
            assert len(labels) == len(set(labels)), f"{point['page']} N = {point['N']}: a label twice, {labels}"
            assert "ours" in labels, f"{point['page']} N = {point['N']}: no call of ours to read the others against"
            sizes = {c["x_bytes"] for c in point["calls"]}
            assert len(sizes) == 1, f"{point['page']} N = {point['N']}: calls on different tensors, {sizes}"
