"""Where the timed pass's time goes, from the GPU turn's trace (SOL_TURN_TRACE: a log a process).
Usage: python3 probe/turns.py TRACE_FOLDER"""
import collections, glob, os, sys

events = []  # (t, pid, name, event, arg)
for path in glob.glob(os.path.join(sys.argv[1], "*.log")):
    pid = os.path.basename(path)[:-4]
    for line in open(path):
        t, name, event, *arg = line.split()
        events.append((float(t), pid, name, event, " ".join(arg)))
events.sort()
named = {e[1] for e in events if e[2] != "?"}  # the timed pass's pages (the warm-up's processes have no name)
events = [e for e in events if e[1] in named]
names, block, ex, sh, wants = {}, {}, [], [], {}
open_ex, open_sh = {}, {}
for t, pid, name, event, arg in events:
    if name != "?":
        names[pid] = name
    if event == "block":
        block[pid] = arg
    elif event == "got" and arg == "exclusive":
        open_ex[pid] = t
    elif event == "got" and arg == "shared":
        open_sh[pid] = (t, block.get(pid, "?"))
    elif event == "let_go" and arg == "exclusive" and pid in open_ex:
        ex.append((open_ex.pop(pid), t, pid))
    elif event == "let_go" and arg == "shared" and pid in open_sh:
        start, line = open_sh.pop(pid)
        sh.append((start, t, pid, line))
    elif event == "want" and arg == "exclusive":
        wants.setdefault(pid, []).append(t)
ex.sort()
span = ex[-1][1] - ex[0][0]
held = sum(b - a for a, b, _ in ex)
print(f"pass (first to last alone): {span:.1f} s; alone {held:.1f} s in {len(ex)} holds; between them {span - held:.1f} s")
blockers, idle, gaps = collections.Counter(), collections.Counter(), []
sh.sort(key=lambda s: s[1])
import bisect
ends = [s[1] for s in sh]
for (a0, a1, p0), (b0, b1, p1) in zip(ex, ex[1:]):
    gap = b0 - a1
    if gap <= 0:
        continue
    gaps.append(gap)
    # the next holder's want: before a1, it waited for the blocks; after, nobody wanted the GPU alone until then
    w = max((x for x in wants.get(p1, []) if x <= b0), default=a1)
    if w > a1:
        idle[names.get(p1, p1)] += w - a1
    # the last shared hold to end before b0 within the gap: the block the timer waited for
    i = bisect.bisect_right(ends, b0) - 1
    if i >= 0 and ends[i] > max(a1, w):
        s = sh[i]
        blockers[f"{names.get(s[2], s[2])}:{s[3]}"] += b0 - max(a1, w)
    else:
        blockers["(none: handoff)"] += b0 - max(a1, w)
gaps.sort()
q = lambda f: gaps[int(f * (len(gaps) - 1))] * 1e3
print(f"gaps: {len(gaps)}, median {q(0.5):.2f} ms, p90 {q(0.9):.2f}, p99 {q(0.99):.1f}, max {gaps[-1] * 1e3:.0f} ms")
print(f"no timer waiting: {sum(idle.values()):.1f} s; waiting for a block: {sum(blockers.values()):.1f} s")
print("blocks that held timers back (page:line, s):")
for k, v in blockers.most_common(25):
    print(f"  {v:7.2f}  {k}")
print("no timer waiting, by the page whose timer came next (s):")
for k, v in idle.most_common(12):
    print(f"  {v:7.2f}  {k}")
by_page = collections.Counter()
for a, b, p, line in sh:
    by_page[f"{names.get(p, p)}:{line}"] += b - a
print("shared holds by page:line (s, the longest):")
for k, v in by_page.most_common(15):
    print(f"  {v:7.2f}  {k}")
