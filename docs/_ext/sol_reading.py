"""A page's reading time, as the landing page and each page's header give it (conf.py).

Prose at WORDS_PER_MINUTE; a kernel's lines (the body of a function decorated ``@triton.jit`` or ``@gluon.jit``, or
named ``*_kernel``: the Pallas kernels) at SECONDS_PER_KERNEL_LINE; every other line of code at SECONDS_PER_CODE_LINE.
Calibrated on a careful first reading by an ML engineer new to Triton of the core pages at commit 482892c
(2026-11-29): 01, 02, 04 and 06 took 55, 75, 70 and 75 minutes, at about 110 words a minute of prose, 30-50 seconds a
kernel line and 10-15 seconds a line of other code; this model gives those pages 56, 73, 67 and 65
(`git show 482892c:tutorials/<page>.py`). The appendix, the one section headed "Appendix: how this page measures"
(its machinery: timers, providers, records, the environment card), is reference, not reading: it is left out, up to
the next section's heading."""

import ast
import re

WORDS_PER_MINUTE = 110
SECONDS_PER_KERNEL_LINE = 40
SECONDS_PER_CODE_LINE = 12
APPENDIX_TITLE = "Appendix: how this page measures"  # the heading of a page's appendix (sol_notebooks folds its code)
APPENDIX = re.compile(rf"^# {re.escape(APPENDIX_TITLE)}\n# -+\n.*?(?=^# %%\n# [^\n]+\n# [-=]{{3,}}$|\Z)", re.M | re.S)


def _kernel_lines(text):
    """The numbers (1-based) of the lines of text that lie in a kernel's body."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            jit = any(ast.unparse(d).split("(")[0].endswith(".jit") for d in node.decorator_list)
            if jit or node.name.endswith("_kernel"):
                lines.update(range(node.lineno, node.end_lineno + 1))
    return lines


def reading_minutes(text):
    """Minutes to read a gallery script as a first reader does: its prose (the docstring and the comment lines) at
    WORDS_PER_MINUTE, its kernels' lines at SECONDS_PER_KERNEL_LINE, its other code at SECONDS_PER_CODE_LINE, its
    appendix left out."""
    text = APPENDIX.sub("", text, count=1)
    kernel_lines = _kernel_lines(text)
    _, doc, body = text.split('"""', 2)
    first = text.count("\n", 0, len(text) - len(body)) + 1  # the body's first line number
    prose, seconds = len(re.findall(r"\w+", doc)), 0
    for number, line in enumerate(body.splitlines(), first):
        line = line.strip()
        if line.startswith("#"):
            prose += len(re.findall(r"\w+", line))
        elif line:
            seconds += SECONDS_PER_KERNEL_LINE if number in kernel_lines else SECONDS_PER_CODE_LINE
    return max(1, round(prose / WORDS_PER_MINUTE + seconds / 60))
