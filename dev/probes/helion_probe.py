"""Helion on the lent GPU: does 1.2.0 import here, how long does a quick autotune take, and how fast are its kernels
beside the site's drop-ins (bf16, M x N = 2**26)?"""
import importlib, json, os, pathlib, sys, time, traceback
OUT = pathlib.Path(os.environ.get("OUT", "/tmp"))
log = open(OUT / "helion.jsonl", "a")
def emit(**r):
    print(json.dumps(r), flush=True); log.write(json.dumps(r) + "\n"); log.flush()
for mod in ("filecheck", "psutil", "rich", "sklearn", "typing_extensions", "scipy"):
    try:
        importlib.import_module(mod); emit(dep=mod, ok=True)
    except Exception as e:
        emit(dep=mod, ok=False, why=str(e)[:200])
try:
    import torch, triton, helion, helion.language as hl
    emit(helion=helion.__version__ if hasattr(helion, "__version__") else "?")
except Exception:
    emit(error=traceback.format_exc()[-1500:]); sys.exit(0)
sys.path.insert(0, "tests")
import conftest
DEV = torch.device("cuda")

@helion.kernel(autotune_effort="quick")
def h_softmax(x: torch.Tensor) -> torch.Tensor:
    n, _m = x.size()
    out = torch.empty_like(x)
    for tile_n in hl.tile(n):
        out[tile_n, :] = torch.nn.functional.softmax(x[tile_n, :], dim=1)
    return out

@helion.kernel(autotune_effort="quick")
def h_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    m, n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        xt = x[tile_m, :].to(torch.float32)
        rstd = torch.rsqrt(torch.mean(xt * xt, dim=-1) + eps)
        out[tile_m, :] = (xt * rstd[:, None] * weight[:].to(torch.float32)).to(out.dtype)
    return out

def ms(fn):
    fn(); torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median")

P01 = conftest.load_page(next(pathlib.Path("tutorials").glob("01_*.py")))
P04 = conftest.load_page(next(pathlib.Path("tutorials").glob("04_*.py")))
T0 = time.time()
for name, hk, ours, ns in (("softmax", h_softmax, lambda x, w: P01["softmax"](x), (1024, 4096)),
                            ("rms_norm", h_rms_norm, lambda x, w: P04["rms_norm"](x, (x.shape[1],), w, 1e-6), (4096,))):
    for n in ns:
        if time.time() - T0 > 300:
            break
        x = torch.randn(2**26 // n, n, device=DEV, dtype=torch.bfloat16)
        w = torch.randn(n, device=DEV, dtype=torch.bfloat16)
        args = (x,) if name == "softmax" else (x, w)
        try:
            t = time.time()
            bound = hk.bind(args)
            config = bound.autotune(args)
            tune = time.time() - t
            cfg = getattr(config, "config", config)
            emit(op=name, N=n, tune_s=round(tune, 1), config=repr(cfg)[:600])
            gb = 2 * x.numel() * 2
            y = torch.empty_like(x)
            emit(op=name, N=n, helion_gbs=gb / ms(lambda: bound(*args)) * 1e-6, ours_gbs=gb / ms(lambda: ours(x, w)) * 1e-6,
                 copy_gbs=gb / ms(lambda: y.copy_(x)) * 1e-6)
        except Exception:
            emit(op=name, N=n, error=traceback.format_exc()[-1500:])
