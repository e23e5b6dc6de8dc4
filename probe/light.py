import pandas as pd, pathlib, sys
def load(d, pat="*.csv"):
    out = []
    for f in sorted(pathlib.Path(d, "results").glob(pat)):
        x = pd.read_csv(f); x["page"] = f.stem
        key = [c for c in x.columns if c not in ("ours, % of light", "ours / best peer", "recommended")]
        x.index = [f.stem + "|" + "|".join(map(str, r)) for r in x[key].itertuples(index=False)]
        out.append(x["ours, % of light"])
    return pd.concat(out)
R = {k: load(k) for k in ("r2", "r3", "r4", "r5", "r6c", "r6w", "r7")}
def cmp(a, b):
    x, y = R[a].align(R[b], join="inner")
    d = (y / x - 1) * 100
    return f"{a:4s} vs {b:4s} n={len(d):3d} median {d.median():+.2f}% mean|d| {d.abs().mean():.2f}% p90 {d.abs().quantile(.9):.2f}% max {d.abs().max():.2f}% (>3%: {(d.abs()>3).sum()})"
for a, b in [("r4","r5"),("r4","r7"),("r5","r7"),("r4","r6w"),("r6c","r6w"),("r6c","r7"),("r6w","r7"),("r3","r6w"),("r3","r7"),("r3","r6c"),("r2","r3")]:
    print(cmp(a, b))
x, y = R["r6c"].align(R["r7"], join="inner"); d = (y/x-1)*100
print(d[d.abs()>3].round(1).to_string())
