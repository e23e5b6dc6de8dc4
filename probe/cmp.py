import pandas as pd, sys, pathlib, numpy as np
a, b = sys.argv[1], sys.argv[2]
rows = []
for f in sorted(pathlib.Path(b, "results").glob("*.csv")):
    g = pathlib.Path(a, "results", f.name)
    if not g.exists(): continue
    x, y = pd.read_csv(g), pd.read_csv(f)
    key = [c for c in x.columns if c not in ("ours, % of light", "ours / best peer", "recommended")]
    m = x.merge(y, on=key, suffixes=("_a", "_b"))
    for c in ("ours, % of light", "ours / best peer"):
        d = (m[c + "_b"] / m[c + "_a"] - 1) * 100
        rows.append((f.stem, c, len(m), d.median(), d.abs().mean(), d.min(), d.max()))
df = pd.DataFrame(rows, columns=["page", "col", "n", "median %", "mean|%|", "min %", "max %"])
pd.set_option("display.width", 200)
print(df.round(2).to_string())
