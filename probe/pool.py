import pandas as pd, sys, pathlib
def load(d):
    out = []
    for f in sorted(pathlib.Path(d, "results").glob("0[124]_*.csv")):
        x = pd.read_csv(f); x["page"] = f.stem
        key = [c for c in x.columns if c not in ("ours, % of light", "ours / best peer", "recommended")]
        out.append(x.set_index(key))
    return pd.concat(out)
r4, r5, r3, r2 = (load(d) for d in ("r4", "r5", "r3", "r2"))
for name, (a, b) in {"serial4 vs serial5": (r4, r5), "serial4 vs conc warm": (r4, r3), "serial5 vs conc warm": (r5, r3),
                     "serial4 vs conc cold": (r4, r2), "serial5 vs conc cold": (r5, r2), "conc cold vs conc warm": (r2, r3)}.items():
    a, b = a.align(b, join="inner")
    for c in ("ours / best peer", "ours, % of light"):
        d = (b[c] / a[c] - 1) * 100
        print(f"{name:24s} {c:18s} n={len(d)} median {d.median():+.2f}% mean|d| {d.abs().mean():.2f}% p90|d| {d.abs().quantile(.9):.2f}% max|d| {d.abs().max():.2f}%")
a, b = r5.align(r3, join="inner")
d = (b["ours / best peer"] / a["ours / best peer"] - 1) * 100
print(d.sort_values().tail(4)); print(d.sort_values().head(3))
