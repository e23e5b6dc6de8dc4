"""Probe: does another process's GPU memory teardown (a page's exit, os._exit with its caching allocator full) or its
CUDA start slow a memory-bound kernel that runs meanwhile? A measurer replays a 1 GiB copy (CUDA graph) back to back
and times each replay with events; disturbers, fresh processes, do one thing each at logged times."""

import json
import os
import statistics
import subprocess
import sys
import time

OUT = os.environ.get("OUT", "/tmp")
STOP = "/tmp/interfere.stop"

DISTURB = {
    "init_only": "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()",
    "exit_20g": "import torch; ts=[torch.empty(2**29, dtype=torch.uint8, device='cuda') for _ in range(40)];"
    " torch.cuda.synchronize()",
    "exit_60g": "import torch; ts=[torch.empty(2**29, dtype=torch.uint8, device='cuda') for _ in range(120)];"
    " torch.cuda.synchronize()",
    "reset_60g": "import torch, ctypes; ts=[torch.empty(2**29, dtype=torch.uint8, device='cuda') for _ in range(120)];"
    " torch.cuda.synchronize(); time.sleep(0.5); cuda=ctypes.CDLL('libcuda.so.1'); d=ctypes.c_int(); cuda.cuDeviceGet(ctypes.byref(d), 0);"
    " mark('free'); r=cuda.cuDevicePrimaryCtxReset_v2(d); mark('freed'); print(json.dumps([time.monotonic(), f'rc{r}']), flush=True);"
    " time.sleep(0.5)",
    "empty_cache_20g": "import torch; ts=[torch.empty(2**29, dtype=torch.uint8, device='cuda') for _ in range(40)];"
    " torch.cuda.synchronize(); mark('ready'); time.sleep(1.0); del ts; mark('free'); torch.cuda.empty_cache();"
    " torch.cuda.synchronize(); mark('freed')",
}
PRELUDE = (
    "import os, sys, time, json\n"
    "def mark(what): print(json.dumps([time.monotonic(), what]), flush=True)\n"
)


def measurer():
    import torch

    x = torch.randn(2**29, device="cuda", dtype=torch.bfloat16)  # 1 GiB read, 1 GiB written
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y.copy_(x)
    g.replay()
    torch.cuda.synchronize()
    records = []
    print("measurer ready", flush=True)
    while not os.path.exists(STOP):
        evs = [torch.cuda.Event(enable_timing=True) for _ in range(41)]
        t0 = time.monotonic()
        evs[0].record()
        for i in range(40):
            g.replay()
            evs[i + 1].record()
        torch.cuda.synchronize()
        records.append((t0, [evs[i].elapsed_time(evs[i + 1]) for i in range(40)]))
    with open(os.path.join(OUT, "measure.json"), "w") as f:
        json.dump(records, f)


def disturb(name):
    code = PRELUDE + "mark('start')\n" + DISTURB[name] + "\nmark('exit')\nos._exit(0)\n"
    t = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    marks = [[t, "spawn"]] + [json.loads(line) for line in p.stdout]
    p.wait()
    marks.append([time.monotonic(), "reaped"])
    return {"name": name, "marks": marks, "rc": p.returncode}


def main():
    if os.path.exists(STOP):
        os.remove(STOP)
    m = subprocess.Popen([sys.executable, __file__, "measure"], stdout=subprocess.PIPE, text=True)
    assert m.stdout.readline().strip() == "measurer ready"
    events = []
    time.sleep(2.0)
    for rep in range(2):
        for name in ("exit_60g", "reset_60g"):
            events.append(disturb(name))
            time.sleep(1.5)
    open(STOP, "w").close()
    m.wait()
    records = json.load(open(os.path.join(OUT, "measure.json")))
    json.dump(events, open(os.path.join(OUT, "events.json"), "w"))
    its = []  # (approximate time, ms) per replay
    for t0, ms in records:
        t = t0
        for v in ms:
            its.append((t, v))
            t += v / 1e3
    base = statistics.median(v for _, v in its)
    print(f"replays {len(its)}, median {base:.4f} ms, p99 {sorted(v for _, v in its)[int(0.99 * len(its))]:.4f}")
    for ev in events:
        marks = dict((w, t) for t, w in ev["marks"])
        windows = [("start->exit", marks["start"], marks.get("exit", marks["reaped"])),
                   ("exit->reaped+0.05", marks.get("exit", marks["reaped"]), marks["reaped"] + 0.05)]
        if "free" in marks:
            windows.append(("free->freed", marks["free"], marks["freed"] + 0.01))
        line = [ev["name"], f"rc {ev['rc']}", " ".join(w for _, w in ev["marks"] if w.startswith("rc")), f"teardown {1e3 * (marks['reaped'] - marks.get('exit', marks['reaped'])):.0f} ms"]
        for label, a, b in windows:
            vals = [v for t, v in its if a <= t <= b]
            if vals:
                slow = sum(v > 1.03 * base for v in vals)
                line.append(f"{label}: {len(vals)} replays, median {statistics.median(vals) / base:.3f}x, "
                            f"max {max(vals) / base:.2f}x, {slow} >3% slow, span {1e3 * (b - a):.0f} ms")
        print(" | ".join(line))


if __name__ == "__main__":
    measurer() if sys.argv[1:] == ["measure"] else main()
