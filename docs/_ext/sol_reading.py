"""A page's reading time, as the landing page and each page's header give it (conf.py).

Prose at WORDS_PER_MINUTE, and every line of code read line by line at SECONDS_PER_CODE_LINE. Calibrated on careful
first readings by an ML engineer new to Triton (2026-11-28, the pages of commit 5accd1a): 01, 02, 04 and 06 took 60,
80, 70 and 75 minutes; this model gives those pages 65, 76, 66 and 68 (`git show 5accd1a:tutorials/<page>.py`).
The appendix, the one section headed "Appendix: how this page measures" (its machinery: timers, providers, records, the
environment card), is reference, not reading: it is left out, up to the next section's heading."""

import re

WORDS_PER_MINUTE = 230
SECONDS_PER_CODE_LINE = 10
APPENDIX = re.compile(r"^# Appendix: how this page measures\n# -+\n.*?(?=^# %%\n# [^\n]+\n# [-=]{3,}$|\Z)", re.M | re.S)


def reading_minutes(text):
    """Minutes to read a gallery script as a first reader does: its prose (the docstring and the comment lines) at
    WORDS_PER_MINUTE, its code at SECONDS_PER_CODE_LINE a line, its appendix left out."""
    text = APPENDIX.sub("", text, count=1)
    _, doc, body = text.split('"""', 2)
    prose, code = len(re.findall(r"\w+", doc)), 0
    for line in body.splitlines():
        line = line.strip()
        if line.startswith("#"):
            prose += len(re.findall(r"\w+", line))
        elif line:
            code += 1
    return max(1, round(prose / WORDS_PER_MINUTE + code * SECONDS_PER_CODE_LINE / 60))
