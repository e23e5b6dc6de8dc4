"""Probe: print the Triton code and launch of Inductor's sums (rows of 16, rows of 16384, all of 16M), bf16 and fp32."""
import glob, os, re, torch
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/ind_cache")
torch._inductor.config.debug = False
cases = [("rows16_bf16", (2**22, 16), torch.bfloat16, 1), ("rows16384_bf16", (4096, 16384), torch.bfloat16, 1),
         ("rows1024_bf16", (2**16, 1024), torch.bfloat16, 1),
         ("all16M_bf16", (2**24,), torch.bfloat16, None), ("all16M_fp32", (2**24,), torch.float32, None)]
from torch._inductor.utils import run_and_get_code
for name, shape, dtype, dim in cases:
    x = torch.randn(shape, device="cuda", dtype=dtype)
    fn = torch.compile((lambda t: t.sum(1)) if dim == 1 else (lambda t: t.sum()), dynamic=False)
    _, codes = run_and_get_code(fn, x)
    print("=" * 30, name)
    for code in codes:
        for block in re.findall(r"@triton_heuristics.*?def triton_.*?(?=\n''', device_str|\n\"\"\", device_str)", code, re.S):
            print(block)
        for launch in re.findall(r".*\.run\(.*", code):
            print("LAUNCH", launch.strip())
