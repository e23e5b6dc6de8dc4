import sys, re, subprocess, triton, os
from triton.backends.compiler import GPUTarget
text = open(sys.argv[1]).read(); warps = int(sys.argv[2])
m = text[text.index("module @"):]
lines = []
for l in m.splitlines():
    if l.startswith("#loc"): continue
    l = re.sub(r'\s*"[^"]*"\(#loc\d*\)', "", l)
    l = re.sub(r'\s*\[unknown\]', "", l)
    l = re.sub(r'\s*loc\([^)]*\)', "", l)
    l = re.sub(r'^module @\w+', "module", l)
    lines.append(l)
    if l == "}": break
src = sys.argv[1] + ".c.ttir"; open(src, "w").write("\n".join(lines) + "\n")
c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=1))
ptx = c.asm["ptx"]; open(src + ".ptx", "w").write(ptx)
ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
r = subprocess.run([ptxas, "-arch=sm_90a", "-v", src + ".ptx", "-o", "/dev/null"], capture_output=True, text=True)
print("\n".join(l for l in r.stderr.splitlines() if "registers" in l or "spill" in l) or r.stderr[-2000:])
