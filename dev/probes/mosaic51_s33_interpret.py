# Probe (session 33): bwd_xch in Mosaic GPU's interpreter: 'Cannot lower jaxpr with effects: SemaphoreEffect' (JAX 0.11.2 and 0.12.0.1).
import sys; sys.argv=["p.py","none"]
exec(open("mosaic51_s33.py").read().split('if __name__')[0])
x,w,dy=data(jnp.float32, 5, 2048)
try:
    dx,dw=bwd_xch(x,w,dy,eps=1e-6,programs=2,wgs=2,chunk=256,slots=4,lag=0,interpret=True)
    ref=float64_vjp(x,w,dy); print("dx", rel(dx,ref[1]), "dw", rel(dw,ref[2]))
except Exception as e:
    print(type(e).__name__, str(e)[:1500])
