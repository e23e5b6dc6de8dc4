"""Every drop-in of the core pages, forward and backward, bf16 and fp32, over the row lengths the pages sweep,
for compute-sanitizer (a GPU is needed; the pages' benchmarks are not run):

    compute-sanitizer --tool racecheck --error-exitcode 99 python3 dev/sanitize_sweep.py
    compute-sanitizer --tool memcheck  --error-exitcode 99 python3 dev/sanitize_sweep.py
    python3 dev/sanitize_sweep.py 04_rms_norm_operator   # one page; without a sanitizer: a quick check that all runs
    python3 dev/sanitize_sweep.py deep_dives/42_rms_norm_staged_gluon   # a staged (Gluon) deep dive
    SWEEP_VERBOSE=1 ...                           # a line before each point, to place a sanitizer's report
    SWEEP_N=1,7,300 ...                           # only these row lengths (a quick racecheck of short rows)

Each page is run up to its "Correctness" cell: its kernels, launch configs and drop-in, nothing timed. Every
output and gradient is compared with torch's, so a sweep that runs clean also computed the right thing. The
staged deep dives (12, 22, 42: Gluon kernels holding a 16-bit row in shared memory) have forward-only drop-ins:
their sweep is bf16 forwards at the row lengths their `_staged_config` stages (dev/sanitize.sh runs their tests too,
each page up to its benchmark).
"""

import os
import pathlib
import sys
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
SWEEP_N = [
    int(n)
    for n in os.environ.get(
        "SWEEP_N", "1,7,300,1024,4100,8192,16384,20000,24576,32752,32768,65536,131072,262144"
    ).split(",")
]
NORMS_UP_TO = 65536  # the norms' sweep ends here (the softmax's and the cross-entropy's go on)
VERBOSE = bool(os.environ.get("SWEEP_VERBOSE"))  # a line before each point
DEVICE = os.environ.get("SWEEP_DEVICE", "cuda")  # "cpu": the plumbing alone, kernels interpreted (tests/test_dev.py)


def page(stem):
    """The page's globals, from the page run up to its correctness cell."""
    source = (ROOT / "tutorials" / f"{stem}.py").read_text(encoding="utf-8")
    scope = {"__name__": f"sweep_{stem}", "__file__": str(ROOT / "tutorials" / f"{stem}.py")}
    exec(compile(source[: source.index("# %%\n# Correctness")], scope["__file__"], "exec"), scope)
    return scope


def drop_in(stem, name):
    """The page's function `name`, from the page run up to its correctness cell."""
    return page(stem)[name]


def cases(stem):
    """(label, ours, torch's) for each drop-in of the page: functions of x, w, b giving the outputs. A staged
    deep dive's case adds the (MIN_N, MAX_N) of its page's 16-bit ``_staged_config``: the lengths it stages."""
    if stem == "01_softmax_backward":
        ours = drop_in(stem, "softmax")
        return [("softmax", lambda x, w, b: ours(x, -1), lambda x, w, b: torch.softmax(x, -1))]
    if stem == "02_layer_norm_drop_in":
        ours = drop_in(stem, "layer_norm")
        f = torch.nn.functional.layer_norm
        return [("layer_norm", lambda x, w, b: ours(x, x.shape[-1:], w, b), lambda x, w, b: f(x, x.shape[-1:], w, b))]
    if stem == "04_rms_norm_operator":
        ours = drop_in(stem, "rms_norm")
        f = torch.nn.functional.rms_norm
        return [("rms_norm", lambda x, w, b: ours(x, x.shape[-1:], w), lambda x, w, b: f(x, x.shape[-1:], w))]
    if stem == "06_cross_entropy_backward":
        # rows of logits, a target a row (one ignored), 'mean' and 'none' with smoothing
        ours = drop_in(stem, "cross_entropy")
        target = lambda x: (
            torch.arange(x.shape[0], device=x.device)
            .mul(7919)
            .remainder(x.shape[1])
            .index_fill(0, torch.tensor([1], device=x.device), -100)
        )
        return [
            (
                "cross_entropy",
                lambda x, w, b: ours(x, target(x)),
                lambda x, w, b: torch.nn.functional.cross_entropy(x, target(x)),
            ),
            (
                "cross_entropy none, smoothing",
                lambda x, w, b: ours(x, target(x), reduction="none", label_smoothing=0.1),
                lambda x, w, b: torch.nn.functional.cross_entropy(x, target(x), reduction="none", label_smoothing=0.1),
            ),
        ]
    if stem == "03_sum_of_all_elements":
        ours = drop_in(stem, "reduce_sum")
        return [
            (f"reduce_sum dim={d}", lambda x, w, b, d=d: ours(x, d), lambda x, w, b, d=d: torch.sum(x, d))
            for d in (None, 0, 1)
        ]
    if stem.startswith("deep_dives/") and "staged" in stem:
        scope = page(stem)
        span = tuple(scope["_staged_config"](2)[k] for k in ("MIN_N", "MAX_N"))
        if stem == "deep_dives/12_softmax_staged_gluon":
            ours = scope["softmax_forward"]
            return [("staged softmax", lambda x, w, b: ours(x), lambda x, w, b: torch.softmax(x, -1), span)]
        if stem == "deep_dives/22_layer_norm_staged_gluon":
            ours, f = scope["layer_norm_forward"], torch.nn.functional.layer_norm
            return [
                ("staged layer_norm", lambda x, w, b: ours(x, w, b), lambda x, w, b: f(x, x.shape[-1:], w, b), span)
            ]
        if stem == "deep_dives/42_rms_norm_staged_gluon":
            ours, f = scope["rms_norm_forward"], torch.nn.functional.rms_norm
            return [("staged rms_norm", lambda x, w, b: ours(x, w), lambda x, w, b: f(x, x.shape[-1:], w), span)]
    raise ValueError(f"no sweep for {stem}")


def run(stem):
    for label, ours, theirs, *span in cases(stem):
        staged = bool(span)  # a staged deep dive: forward only, bf16, the row lengths it stages
        for dtype in (torch.bfloat16,) if staged else (torch.float32, torch.bfloat16):
            done = []  # the row lengths run
            for n in SWEEP_N:
                if staged and not span[0][0] <= n <= span[0][1] or not staged and n > NORMS_UP_TO and "norm" in label:
                    continue
                done.append(n)
                rows = 64 if n <= 4096 else max(2, 2**20 // n)  # 64 short rows, as racecheck found them
                if VERBOSE:  # which point a sanitizer report that follows belongs to
                    print(f"{stem}: {label} {str(dtype)[6:]} N = {n}", flush=True)
                torch.manual_seed(n)
                x = torch.randn(rows, n, device=DEVICE, dtype=dtype).requires_grad_(not staged)
                w = torch.randn(n, device=DEVICE, dtype=dtype).requires_grad_(not staged)
                b = torch.randn(n, device=DEVICE, dtype=dtype).requires_grad_(not staged)
                outs = []
                for fn in (ours, theirs):
                    y = fn(x, w, b)
                    if staged:  # no autograd: the output alone
                        outs.append((y,))
                        continue
                    torch.manual_seed(n + 1)  # the same dy for ours and torch's
                    dy = torch.ones_like(y) if y.dim() == 0 else torch.randn_like(y)
                    grads = torch.autograd.grad(y, [t for t in (x, w, b) if t.requires_grad], dy, allow_unused=True)
                    outs.append((y, *grads))
                torch.cuda.synchronize() if DEVICE == "cuda" else None
                tol = dict(rtol=2e-2, atol=5e-2) if dtype == torch.bfloat16 else dict(rtol=1e-3, atol=1e-3)
                for i, (a, e) in enumerate(zip(*outs)):
                    if e is None:
                        assert a is None or not a.any(), f"{label} {dtype} N={n}: output {i}"
                        continue
                    torch.testing.assert_close(a, e, **tol, msg=lambda m: f"{label} {dtype} N={n}, output {i}: {m}")
            print(
                f"{stem}: {label} {str(dtype)[6:]}, N = {', '.join(map(str, done)) or 'none in its range'}: "
                + ("clean run, matches torch" if done else "nothing run"),
                flush=True,
            )


if __name__ == "__main__":
    assert DEVICE == "cpu" or torch.cuda.is_available(), "the sanitizer sweep needs a GPU"
    for stem in sys.argv[1:] or [
        "01_softmax_backward",
        "02_layer_norm_drop_in",
        "03_sum_of_all_elements",
        "04_rms_norm_operator",
        "06_cross_entropy_backward",
        "deep_dives/12_softmax_staged_gluon",
        "deep_dives/22_layer_norm_staged_gluon",
        "deep_dives/42_rms_norm_staged_gluon",
    ]:
        run(stem)
