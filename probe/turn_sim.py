# The timed pass's turn, simulated: JOBS pages, each a code block of CYCLES (segment of S s, then a timer of T s),
# forked as the build forks them; the wall time and whether a timer ever overlapped another page's work.
import os, sys, time, random, pathlib
sys.path.insert(0, os.environ.get("EXT", "docs/_ext"))
import sol_build

JOBS, CYCLES, S, T = (int(a) if i < 2 else float(a) for i, a in enumerate(sys.argv[1:5]))

def page(turn, log, seed):
    os.environ["SOL_GPU_TURN"] = turn
    rng = random.Random(seed)
    spans = []
    def segment():
        a = time.time(); time.sleep(S * rng.uniform(0.5, 1.5)); spans.append(("work", a, time.time()))
    def timer():
        a = time.time(); time.sleep(T); spans.append(("timer", a, time.time()))
    def block():
        for _ in range(CYCLES):
            segment()
            sol_build.gpu_turn(timer)()
    sol_build.gpu_turn(block, timer=False)()
    with open(log, "a") as f:
        f.writelines(f"{k} {a} {b} {seed}\n" for k, a, b in spans)
    return 0

d = pathlib.Path(f"/tmp/turnsim{os.getpid()}"); d.mkdir(exist_ok=True)
turn, log = str(d / "turn"), str(d / "log")
start = time.monotonic()
kids = [sol_build.start_child(page, turn, log, i) for i in range(JOBS)]
for pid, fd in kids:
    with os.fdopen(fd, "rb") as p:
        data = p.read()
    sol_build.finish_child(data, os.waitpid(pid, 0)[1])
wall = time.monotonic() - start
spans = [l.split() for l in open(log).read().splitlines()]
spans = [(k, float(a), float(b), s) for k, a, b, s in spans]
clash = sum(1 for x in spans if x[0] == "timer" for y in spans if y[3] != x[3] and x[1] < y[2] and y[1] < x[2])
ideal = CYCLES * (S * 1.0 + JOBS * T)
print(f"jobs {JOBS} cycles {CYCLES} S {S} T {T}: wall {wall:.2f} s (timers alone {CYCLES * JOBS * T:.2f} s; "
      f"batched about {ideal:.2f}; alternating about {CYCLES * JOBS * (S + T):.2f}); clashes {clash}")
