"""Where the softmax drop-in's host time goes, layer by layer: the drop-in, its torch.library operator, the
operator's Python body, the launcher, and the bare Triton launch; torch's own softmax for scale. Small tensors: the
GPU idles, so time a call is the host's. From the repository root: python3 probe/hostiso.py"""
import json, sys, time, torch, triton
sys.path.insert(0, "tests")
from conftest import load_tutorial  # noqa: E402

def us(fn, k=2000):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(k):
        fn()
    torch.cuda.synchronize()
    return round((time.perf_counter() - t) / k * 1e6, 1)

f = load_tutorial("01_softmax_backward")
x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
y = torch.empty_like(x)
bm, bn, nw = f["_fused_config"](4096, 2)
kernel = f["softmax_fwd_kernel"]
row = {}
with torch.no_grad():
    row["torch.softmax"] = us(lambda: torch.softmax(x, -1))
    row["drop-in softmax"] = us(lambda: f["softmax"](x, -1))
    row["torch.ops custom op"] = us(lambda: f["softmax_fwd_op"](x))
    row["op's python body"] = us(lambda: f["_rows_op"](f["softmax_rows_forward"], x))
    row["launcher"] = us(lambda: f["softmax_rows_forward"](x, y))
    row["bare kernel[grid]"] = us(lambda: kernel[(triton.cdiv(8, bm),)](x, y, 8, 4096, 4096, 4096, BLOCK_M=bm,
                                                                          BLOCK_N=bn, num_warps=nw))
    row["empty_like"] = us(lambda: torch.empty_like(x))
    row["_fused_config"] = us(lambda: f["_fused_config"](4096, 2))
xg = x.clone().requires_grad_()
dy = torch.randn_like(x)
row["torch fwd+bwd"] = us(lambda: torch.autograd.grad(torch.softmax(xg, -1), xg, dy), 500)
row["drop-in fwd+bwd"] = us(lambda: torch.autograd.grad(f["softmax"](xg, -1), xg, dy), 500)
print(json.dumps(row), flush=True)
