import pandas as pd, pathlib, sys
def load(d, col="ours, % of light"):
    out = []
    for f in sorted(pathlib.Path(d, "results").glob("*.csv")):
        x = pd.read_csv(f); x["page"] = f.stem
        if col not in x.columns: continue
        key = [c for c in x.columns if c not in ("ours, % of light", "ours / best peer", "recommended")]
        x.index = [f.stem + "|" + "|".join(map(str, r)) for r in x[key].itertuples(index=False)]
        out.append(x[col])
    return pd.concat(out)
names = {"c7": "results_c7", "c6c": "results_c6_cold", "c6w": "results_c6_warm", "nc": "ncold", "nw": "nwarm"}
R = {k: load(v) for k, v in names.items()}
def cmp(a, b):
    x, y = R[a].align(R[b], join="inner")
    d = (y / x - 1) * 100
    return f"{a:4s} vs {b:4s} n={len(d):3d} median {d.median():+.2f}% mean|d| {d.abs().mean():.2f}% p90 {d.abs().quantile(.9):.2f}% max {d.abs().max():.2f}% (>3%: {(d.abs()>3).sum()})"
for a, b in [("c7", "nc"), ("c7", "nw"), ("nc", "nw"), ("c6c", "nc"), ("c6c", "c7"), ("c6c", "c6w")]:
    print(cmp(a, b))
for a, b in [("c7", "nc"), ("c7", "nw")]:
    x, y = R[a].align(R[b], join="inner"); d = (y/x-1)*100
    print(a, b); print(pd.DataFrame({a: x, b: y, "d%": d})[d.abs() > 3].round(1).to_string())
