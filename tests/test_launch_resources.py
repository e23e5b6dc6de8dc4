"""Every Triton launch a page's drop-ins and launchers can choose fits the GPUs the site names, checked without a GPU:
each launch is compiled with Triton's compiler for the target of the GPU that chose it, and must ask for no more shared
memory a block than that GPU gives one with opt-in (163 KB = 166,912 B on sm_80, 99 KB = 101,376 B on sm_86 and sm_89,
227 KB = 232,448 B on sm_90), at most 255 registers a thread, and no more registers a block than an SM has (65,536).

The launches: each page is loaded as the other tests load it, then its entry points (``PAGES``) are called as if on
each GPU of ``GPU_STAND_INS`` (A100, A10, RTX 3090, L4, RTX 4090, H100 PCIe, H100 SXM, H200): ``ON_GPU`` is set,
``torch.cuda``'s device queries answer that GPU's figures (SM count, L2 size, shared memory, registers, compute
capability), the page's top-level settings that read them are evaluated again (``device_settings``), and each kernel's
``run`` records the launch instead of running it. Where a launcher compiles a kernel to size its grid
(``kernel.warmup``, CUDA's occupancy calculator), it is given the figures of that kernel compiled for that GPU and an
occupancy computed from them. Nothing runs: the tensors are allocated, never read; the page is put back as it was.

What is swept: fp32 and bf16; the widths N each page benchmarks on a GPU (its ``SWEEP*``, ``WIDTHS`` or ``POINTS``), the
odd width below the widest, and over its ``RANGE`` (up to the widest swept N) its ends and every power of two from 256
(every fourth one below); M x N about ``ELEMENTS``. Each page's options are on (weight, bias, their gradients; for the
losses: a gradient with and without label smoothing, and the forward alone): an option off only drops loads.

The compiles: a compile worker (this file run as a script, in a process without Triton's interpreter) defines each
page's @jit functions from its source, specializes each recorded launch as Triton does for a real one (dtypes, 16-byte
alignment, integers equal to 1 or multiples of 16), compiles it for the target and reads the shared memory (Triton's,
plus the cubin's static) and the registers (cuobjdump). The launches of sm_80, sm_86 and sm_89 GPUs are compiled for
sm_80 (``COMPILED_FOR``): Triton compiles the three alike, with the same shared memory (each page's test compiles its
launch of the most shared memory for sm_86 and sm_89 too, to be sure) and registers a few apart under the same limits.
Each compile happens once a test session, and stays in Triton's cache.

Pinned: what the core pages choose on an H100 SXM and an H200 (every launch, its meta-parameters and grid, at the same
widths) is held in tests/pinned_launches.json; a change is made on purpose (``SOL_PIN_LAUNCHES=1`` rewrites it).

Not covered: the step-0 kernels of the pages' ladders, and what their benchmarks run besides the drop-ins.
"""

import ast
import json
import os
import re
import subprocess
import sys
import tempfile


def _compile_worker():
    """Compile requests, one JSON line each on stdin, answered one JSON line each on the original stdout."""
    import symtable

    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    try:
        from triton.experimental.gluon._runtime import GluonASTSource
    except ImportError:
        GluonASTSource = None
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the pages' imports print goes to stderr
    triton.knobs.runtime.interpret = False
    cuobjdump = triton.knobs.nvidia.cuobjdump.path
    scopes, figures = {}, {}

    class Stub:  # a tensor argument as Triton's specialization sees one: a dtype and an address
        def __init__(self, dtype, aligned):
            self.dtype, self.address = getattr(torch, dtype), 0 if aligned else 8

        def data_ptr(self):
            return self.address

    def decode(value):
        return Stub(value["tensor"], value["aligned"]) if isinstance(value, dict) else value

    def kernels_of(path, head_chars):
        """The page's top-level @jit functions, defined with what they use and nothing more: no cell of it runs."""
        if (path, head_chars) in scopes:
            return scopes[path, head_chars]
        source = open(path, encoding="utf-8").read()[:head_chars]
        statements, table = ast.parse(source).body, symtable.symtable(source, path, "exec")
        tables = {t.get_name(): t for t in table.get_children()}

        def globals_of(t):  # the module-level names a function or class body reads, nested ones included
            names = {
                s.get_name()
                for s in t.get_symbols()
                if s.is_global() or (t.get_type() == "class" and s.is_referenced())
            }
            return names.union(*(globals_of(child) for child in t.get_children()))

        def bound(node):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                return {node.name}
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                return {(a.asname or a.name).split(".")[0] for a in node.names}
            return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}

        def used(node):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                outer = [*node.decorator_list, *getattr(node, "bases", [])]
                if isinstance(node, ast.FunctionDef):
                    outer += [*node.args.defaults, *(a.annotation for a in node.args.args if a.annotation)]
                return globals_of(tables[node.name]).union(
                    *({n.id for n in ast.walk(o) if isinstance(n, ast.Name)} for o in outer)
                )
            return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}

        keep = {
            i
            for i, s in enumerate(statements)
            if isinstance(s, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in s.decorator_list)
        }
        wanted, seen = set().union(*(used(statements[i]) for i in keep)), set()
        while wanted - seen:
            name = (wanted - seen).pop()
            seen.add(name)
            for i, statement in enumerate(statements):
                if i not in keep and name in bound(statement):
                    keep.add(i)
                    wanted |= used(statement)
        scope = {"__name__": "tutorial_" + os.path.basename(path)[:-3], "__file__": path}
        exec(compile(ast.Module([statements[i] for i in sorted(keep)], []), path, "exec"), scope)
        scopes[path, head_chars] = scope
        return scope

    def figures_of(request):
        kernel = kernels_of(request["page"], request["head_chars"]).get(request["kernel"])
        if not isinstance(kernel, JITFunction) or kernel.fn.__code__.co_firstlineno != request["line"]:
            raise RuntimeError(
                f"{request['kernel']} is not a @jit function at line {request['line']} of "
                f"{request['page']} (was the page edited while the test ran?)"
            )
        target = GPUTarget("cuda", request["cap"], 32)
        backend = make_backend(target)
        binder = create_function_from_signature(kernel.signature, kernel.params, backend)
        args, kwargs = [decode(a) for a in request["args"]], {k: decode(v) for k, v in request["kwargs"].items()}
        bound_args, specialization, options = binder(*args, **kwargs)
        options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound_args, specialization, options)
        key = (
            request["page"],
            request["kernel"],
            request["cap"],
            repr(signature),
            repr(constexprs),
            repr(attrs),
            repr(sorted(options.__dict__.items())),
        )
        if key not in figures:
            source_type = GluonASTSource if kernel.is_gluon() else ASTSource
            compiled = triton.compile(
                source_type(kernel, signature, constexprs, attrs), target=target, options=options.__dict__
            )
            with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
                cubin.write(compiled.asm["cubin"])
                cubin.flush()
                usage = subprocess.run(
                    [cuobjdump, "-res-usage", cubin.name], capture_output=True, text=True, check=True
                ).stdout
            found = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", usage)
            if found is None:
                raise RuntimeError(f"cuobjdump -res-usage said nothing of the kernel's resources:\n{usage}")
            regs, stack, static, local = map(int, found.groups())
            figures[key] = dict(
                shared=compiled.metadata.shared,
                static=static,
                regs=regs,
                stack=stack,
                local=local,
                num_warps=compiled.metadata.num_warps,
                num_stages=options.num_stages,
                maxnreg=options.maxnreg,
                specialization=f"{signature} {constexprs}",
            )
        return figures[key]

    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = figures_of(request)
        except Exception as error:  # the compiler's refusal is a finding too: handed back, the worker carries on
            reply = {"error": f"{type(error).__name__}: {error}"[-3000:]}
        answer.write(json.dumps(reply) + "\n")
        answer.flush()


if __name__ == "__main__":  # the compile worker: run by the tests below, in a process without the interpreter
    _compile_worker()
    sys.exit(0)

import contextlib
import ctypes
import dataclasses
import importlib
import math
import pathlib
import threading
import types

import filelock
import pytest
import torch
import triton
from triton.runtime.jit import KernelInterface

from conftest import DEVICE, ROOT, TUTORIALS, load_tutorial, untimed_source

ELEMENTS, MOST_ROWS = 2**24, 2**16  # M x N of the stand-in tensors (never read: only allocated), M at most
DTYPES = (torch.float32, torch.bfloat16)
REGISTERS_PER_SM, MOST_REGISTERS_PER_THREAD = 65536, 255


@dataclasses.dataclass(frozen=True)
class Target:
    cap: int
    shared_per_block: int  # with opt-in: what one program may have (cudaDevAttrMaxSharedMemoryPerBlockOptin)
    shared_per_sm: int
    threads_per_sm: int
    blocks_per_sm: int


TARGETS = {
    80: Target(80, 166912, 167936, 2048, 32),
    86: Target(86, 101376, 102400, 1536, 16),
    89: Target(89, 101376, 102400, 1536, 24),
    90: Target(90, 232448, 233472, 2048, 32),
}
# sm_80, sm_86 and sm_89 compile alike (the same shared memory; ptxas' register counts a few apart, under the same
# register limits): a launch is compiled for sm_80 for the three, and each page's test compiles its launch of the most
# shared memory for sm_86 and sm_89 too, and fails where they differ. {80: 80, 86: 86, 89: 89, 90: 90}: each its own.
COMPILED_FOR = {80: 80, 86: 80, 89: 80, 90: 90}
# What torch.cuda.get_device_properties says of GPUs of each target (the figures the pages' configs read)
GPU_STAND_INS = {
    "A100": dict(cap=80, multi_processor_count=108, L2_cache_size=40 * 2**20, total_memory=80 * 2**30),
    "A10": dict(cap=86, multi_processor_count=72, L2_cache_size=6 * 2**20, total_memory=24 * 2**30),
    "RTX 3090": dict(cap=86, multi_processor_count=82, L2_cache_size=6 * 2**20, total_memory=24 * 2**30),
    "L4": dict(cap=89, multi_processor_count=58, L2_cache_size=48 * 2**20, total_memory=24 * 2**30),
    "RTX 4090": dict(cap=89, multi_processor_count=128, L2_cache_size=72 * 2**20, total_memory=24 * 2**30),
    "H100 PCIe": dict(cap=90, multi_processor_count=114, L2_cache_size=50 * 2**20, total_memory=80 * 2**30),
    "H100 SXM": dict(cap=90, multi_processor_count=132, L2_cache_size=50 * 2**20, total_memory=80 * 2**30),
    "H200": dict(cap=90, multi_processor_count=132, L2_cache_size=60 * 2**20, total_memory=141 * 2**30),
}
# (memory clock in kHz, as CUDA gives it, a transfer on each edge; bus width in bits): the peak bandwidth the pages'
# Little's law reads (A100 80 GB SXM 2.04 TB/s, H100 SXM 3.35 TB/s, H200 4.8 TB/s)
MEMORY = {
    "A100": (1593_000, 5120),
    "A10": (6251_000, 384),
    "RTX 3090": (9751_000, 384),
    "L4": (6251_000, 192),
    "RTX 4090": (10501_000, 384),
    "H100 PCIe": (1593_000, 5120),
    "H100 SXM": (2619_000, 5120),
    "H200": (3201_000, 6016),
}


def device_properties(name):
    """A stand-in for torch.cuda.get_device_properties(...) of the GPU ``name``."""
    spec = GPU_STAND_INS[name]
    target = TARGETS[spec["cap"]]
    return types.SimpleNamespace(
        name=f"NVIDIA {name} (stand-in)",
        major=spec["cap"] // 10,
        minor=spec["cap"] % 10,
        multi_processor_count=spec["multi_processor_count"],
        L2_cache_size=spec["L2_cache_size"],
        total_memory=spec["total_memory"],
        memory_clock_rate=MEMORY[name][0],
        memory_bus_width=MEMORY[name][1],
        regs_per_multiprocessor=REGISTERS_PER_SM,
        warp_size=32,
        max_threads_per_multi_processor=target.threads_per_sm,
        shared_memory_per_multiprocessor=target.shared_per_sm,
        shared_memory_per_block_optin=target.shared_per_block,
        shared_memory_per_block=49152,
        is_integrated=False,
    )


# ----------------------------------------------------------------------------------------------------------------------
# The compile worker's client


class Compiler:
    """Sends launches to compile workers (several where the cores allow); each answer is kept for the test session."""

    def __init__(self, workers):
        self.workers, self.procs, self.answers, self.lock = workers, {}, {}, threading.Lock()

    def proc(self, i):
        with self.lock:
            if i not in self.procs:
                env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"CUDA_VISIBLE_DEVICES": ""}
                log = tempfile.TemporaryFile(mode="w+")
                self.procs[i] = (
                    subprocess.Popen(
                        [sys.executable, __file__, "--compile-worker"],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=log,
                        text=True,
                        env=env,
                        cwd=ROOT,
                    ),
                    log,
                )
            return self.procs[i]

    def ask(self, i, launch, cap):
        proc, log = self.proc(i)
        request = dict(
            page=launch.page,
            head_chars=launch.head_chars,
            kernel=launch.kernel,
            line=launch.line,
            args=json.loads(launch.args),
            kwargs=json.loads(launch.kwargs),
            cap=cap,
        )
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        reply = proc.stdout.readline()
        if not reply:
            log.seek(0)
            raise RuntimeError(f"the compile worker stopped:\n{log.read()[-4000:]}")
        self.answers[launch, cap] = json.loads(reply)

    def figures(self, launch, cap):
        if (launch, cap) not in self.answers:
            self.ask(0, launch, cap)
        return self.answers[launch, cap]

    def compile_all(self, pairs):
        """Every (launch, cap) not yet answered, spread over the workers (one launch's versions to one worker)."""
        shares = {}
        for launch, cap in dict.fromkeys(pairs):
            if (launch, cap) not in self.answers:
                shares.setdefault(hash((launch.kernel, launch.kwargs, cap)) % self.workers, []).append((launch, cap))
        failed = []

        def work(i, share):
            try:
                for launch, cap in share:
                    self.ask(i, launch, cap)
            except Exception as error:  # raised again below, in the test's thread
                failed.append(error)

        threads = [threading.Thread(target=work, args=item) for item in shares.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failed:
            raise failed[0]

    def close(self):
        for proc, log in self.procs.values():
            proc.stdin.close()
            proc.wait(timeout=60)
            log.close()


@pytest.fixture(scope="session")
def compiler():
    # the cores this test process may use: all of them, or its share beside pytest-xdist's other workers
    workers = len(os.sched_getaffinity(0)) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    made = Compiler(max(1, min(8, workers)))
    yield made
    made.close()


# ----------------------------------------------------------------------------------------------------------------------
# Recording launches


@dataclasses.dataclass(frozen=True)
class Launch:
    """A kernel launch as Triton specializes it: the kernel, its arguments (tensors as dtype and alignment) and its
    meta-parameters, as JSON."""

    page: str
    head_chars: int
    kernel: str
    line: int
    args: str
    kwargs: str


def encode(value):
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):  # a tensor, or Triton's MockTensor
        return {"tensor": str(value.dtype).removeprefix("torch."), "aligned": value.data_ptr() % 16 == 0}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(
        f"a kernel argument of type {type(value).__name__} ({value!r}): this test cannot send it to the "
        "compiler; teach encode() about it"
    )


def usage(figures, target):
    """What a compiled kernel asks of the target beyond its limits: [(what, asked, limit)]."""
    over, shared, static = [], figures["shared"] + figures["static"], figures["static"]
    if shared > target.shared_per_block:
        what = "bytes of shared memory a block" + (f" ({static:,} of them static)" if static else "")
        over.append((what, shared, target.shared_per_block))
    if figures["regs"] > MOST_REGISTERS_PER_THREAD:
        over.append(("registers a thread", figures["regs"], MOST_REGISTERS_PER_THREAD))
    threads = 32 * figures["num_warps"]
    regs = math.ceil(figures["regs"] * 32 / 256) * 256 * threads // 32  # handed out 256 at a time to each warp
    if regs > REGISTERS_PER_SM:
        over.append((f"registers a block ({figures['regs']} a thread x {threads} threads)", regs, REGISTERS_PER_SM))
    return over


def programs_per_sm(figures, target, threads=None):
    """CUDA's occupancy: blocks of this compiled kernel an SM holds at once (sm_80 and later: 1 KB reserved a block)."""
    threads = threads or 32 * figures["num_warps"]
    regs_per_warp = math.ceil(max(figures["regs"], 1) * 32 / 256) * 256
    shared = figures["shared"] + figures["static"] + 1024
    by_shared = target.shared_per_sm // shared if shared <= target.shared_per_block + 1024 else 0
    by_regs = REGISTERS_PER_SM // regs_per_warp // math.ceil(threads / 32)
    return min(target.blocks_per_sm, target.threads_per_sm // threads, by_regs, by_shared)


class Handle:
    """A compiled kernel's handle as a page hands it to the driver (``compiled.function``): not a pointer."""

    def __init__(self, figures, target):
        self.figures, self.target = figures, target


class CompiledStandIn:
    """What ``kernel.warmup(...)`` returns to a page: the figures of the kernel compiled for the GPU in hand."""

    def __init__(self, figures, target):
        self.n_regs, self.n_spills = figures["regs"], figures["local"] // 4
        self.metadata = types.SimpleNamespace(
            shared=figures["shared"], num_warps=figures["num_warps"], num_stages=figures["num_stages"]
        )
        self.function = Handle(figures, target)

    def _init_handles(self):
        pass


class LibcudaStandIn:
    """``ctypes.CDLL("libcuda.so.1")`` for a page's occupancy query about a CompiledStandIn."""

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, count, function, threads, smem):
        count._obj.value = programs_per_sm(function.figures, function.target, threads.value)
        return 0


class CtypesStandIn:
    """The page's ``ctypes``, with the CUDA driver answered from the compiled figures."""

    def __getattr__(self, name):
        return getattr(ctypes, name)

    def CDLL(self, name, *args, **kwargs):
        return LibcudaStandIn() if "libcuda" in name else ctypes.CDLL(name, *args, **kwargs)

    def c_void_p(self, value=None):
        return value if isinstance(value, Handle) else ctypes.c_void_p(value)


class Recorder:
    """Patched in as each kernel's ``run``: records the launch and runs nothing; ``warmup`` gets the compiled
    figures for the GPU in hand."""

    def __init__(self, page, compiler):
        self.path, self.head_chars = str(page.path), len(untimed_source(page.path.read_text(encoding="utf-8")))
        self.compiler, self.gpu, self.context, self.launches = compiler, None, None, []  # [(Context, Launch, grid)]

    def launch(self, kernel, args, kwargs):
        fn, meta = kernel.fn, {k: encode(v) for k, v in sorted(kwargs.items())}
        return Launch(
            self.path,
            self.head_chars,
            fn.__name__,
            fn.__code__.co_firstlineno,
            json.dumps([encode(a) for a in args]),
            json.dumps(meta),
        )

    def run_for(self, kernel):
        def run(*args, grid, warmup, **kwargs):
            launch = self.launch(kernel, args, kwargs)
            if warmup:
                cap = GPU_STAND_INS[self.gpu]["cap"]
                figures = self.compiler.figures(launch, COMPILED_FOR[cap])
                if "error" in figures:
                    raise RuntimeError(
                        f"{launch.kernel} does not compile for sm_{COMPILED_FOR[cap]}: {figures['error']}"
                    )
                return CompiledStandIn(figures, TARGETS[cap])
            self.launches.append((self.context, launch, tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)))

        return run


PROTECTED = {"ON_GPU", "DEVICE", "WHERE", "BUILT"}  # kept as loaded: the tensors stay where the kernels ran
PLAIN_CALLS = set("min max dict int float getattr range len tuple list set abs round bool str sorted".split())


def device_settings(path):
    """The page's top-level assignments (before its timer) that differ on a GPU: those that read ``ON_GPU`` or
    ``torch.cuda``, its empty caches, and those that read a name these set; only plain expressions (calls of
    ``torch.cuda``, builtins and ``triton.cdiv``/``next_power_of_2``), never a page function or a tensor."""
    statements, changed, chosen = ast.parse(untimed_source(path.read_text(encoding="utf-8"))).body, set(), []
    for statement in statements:
        if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is None:
            continue
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        source = ast.unparse(statement.value)
        reads = {n.id for n in ast.walk(statement.value) if isinstance(n, ast.Name)}
        calls = [ast.unparse(c.func) for c in ast.walk(statement.value) if isinstance(c, ast.Call)]
        plain = all(
            c in PLAIN_CALLS or c.startswith("torch.cuda.") or c in ("triton.cdiv", "triton.next_power_of_2")
            for c in calls
        )
        empty = any(
            isinstance(n, (ast.Dict, ast.List)) and not (n.keys if isinstance(n, ast.Dict) else n.elts)
            for n in ast.walk(statement.value)
        )
        on_gpu = "ON_GPU" in reads or "torch.cuda" in source or empty or reads & changed
        if plain and on_gpu and not names & PROTECTED:
            chosen.append(statement)
            changed |= names
    return chosen


@contextlib.contextmanager
def as_if_on(page, gpu, recorder):
    """The page as its launchers see it on the GPU ``gpu``, its kernels recording instead of running; all put back."""
    scope, props = page.data, device_properties(gpu)
    kernels = [k for k in scope.values() if isinstance(k, KernelInterface) and hasattr(k, "fn")]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.cuda, "get_device_properties", lambda *args, **kwargs: props)
        mp.setattr(torch.cuda, "get_device_capability", lambda *args, **kwargs: (props.major, props.minor))
        mp.setattr(torch.cuda, "get_device_name", lambda *args, **kwargs: props.name)
        mp.setattr(torch.cuda, "is_current_stream_capturing", lambda *args, **kwargs: False)
        mp.setitem(scope, "ON_GPU", True)
        if "ctypes" in scope:
            mp.setitem(scope, "ctypes", CtypesStandIn())
        scratch = dict(scope)
        for statement in device_settings(page.path):
            exec(compile(ast.Module([statement], []), str(page.path), "exec"), scratch)
            for target in statement.targets if isinstance(statement, ast.Assign) else [statement.target]:
                for name in {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}:
                    mp.setitem(scope, name, scratch[name])
        recorder.gpu = gpu
        cached = [f for f in scope.values() if callable(getattr(f, "cache_clear", None))]  # what reads the device once
        try:
            for f in cached:
                f.cache_clear()
            for kernel in kernels:
                vars(kernel)["run"] = recorder.run_for(kernel)
            yield
        finally:
            for kernel in kernels:
                vars(kernel).pop("run", None)
            for f in cached:
                f.cache_clear()


# ----------------------------------------------------------------------------------------------------------------------
# The widths each page is for


def ints_in(value):
    if isinstance(value, bool):
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple, set, range)):
        return set().union(*map(ints_in, value))
    return set()


def swept_widths(page):
    """The N (V) the page benchmarks on a GPU: its top-level SWEEP*, WIDTHS and POINTS (their GPU branch)."""
    found = set()
    for statement in ast.parse(page.path.read_text(encoding="utf-8")).body:
        if not isinstance(statement, ast.Assign):
            continue
        for target in statement.targets:
            names = [target] if isinstance(target, ast.Name) else getattr(target, "elts", [])
            value = statement.value
            if isinstance(value, ast.IfExp) and "ON_GPU" in ast.unparse(value.test):
                value = value.body
            for i, name in enumerate(names):
                if isinstance(name, ast.Name) and (name.id.startswith("SWEEP") or name.id in ("WIDTHS", "POINTS")):
                    evaluated = eval(
                        compile(ast.Expression(value), str(page.path), "eval"), {"torch": torch, "triton": triton}
                    )
                    found |= ints_in(evaluated[i] if len(names) > 1 else evaluated)
    return found


def widths(page):
    """The swept N and the odd width below the widest; over each RANGE (up to the widest swept N) its ends, every power
    of two from 256 (or the narrowest swept N) and every fourth one below; a page recommended for no N: every power of
    two across its sweep."""
    swept = swept_widths(page)
    assert swept, f"{page.path.name}: no SWEEP*, WIDTHS or POINTS of the GPU's benchmark found"
    least, most = min(swept), max(swept)
    chosen = swept | {most - 1}
    for r in page.data.get("RANGE", {}).values():
        low, high = r.start, min(r.stop - 1, most)
        powers = [2**k for k in range(high.bit_length()) if 2**k >= min(least, 256) or k % 4 == 0]
        chosen |= {n for n in [low, high, *powers] if low <= n <= high}
    if not page.data.get("RANGE"):
        chosen |= {2**k for k in range(least.bit_length() - 1, most.bit_length())}
    return sorted(n for n in chosen if n >= 1)


# ----------------------------------------------------------------------------------------------------------------------
# Each page's entry points


def matrix(n, dtype, grad=False):
    """M x N, M a multiple of 16 where N leaves room (as a batch's rows mostly are: one compiled version for all)."""
    rows = min(MOST_ROWS, ELEMENTS // n)
    rows = rows // 16 * 16 if rows >= 16 else max(1, rows)
    return torch.empty((rows, n), device=DEVICE, dtype=dtype).requires_grad_(grad)


def gradients(out, inputs):
    torch.autograd.grad(out, [t for t in inputs if t is not None], torch.empty_like(out))


def softmax_01(p, dtype, n, variant):
    x = matrix(n, dtype, grad=True)
    gradients(p["softmax"](x, dim=-1), [x])


def softmax_forward_01(p, dtype, n, variant):
    """The forward page's step 1 (its drop-in, forward and backward, is the next page's)."""
    if n <= p["MAX_FUSED_N"]:
        p["softmax_rows_forward"](matrix(n, dtype), matrix(n, dtype))


def layer_norm_02(p, dtype, n, variant):
    x = matrix(n, dtype, grad=True)
    w, b = (
        torch.empty(n, device=DEVICE, dtype=dtype, requires_grad=True) if variant == "affine" else None
        for _ in range(2)
    )
    gradients(p["layer_norm"](x, (n,), w, b), [x, w, b])


def layer_norm_forward_02(p, dtype, n, variant):
    """The forward page's step 1 (its drop-in, forward and backward, is the next page's)."""
    x, y = matrix(n, dtype), matrix(n, dtype)
    w, b = (torch.empty(n, device=DEVICE, dtype=dtype) if variant == "affine" else None for _ in range(2))
    mean, rstd = (torch.empty(len(x), device=DEVICE) for _ in range(2))
    p["layer_norm_rows_forward"](x, y, w, b, mean, rstd, 1e-5)


def layer_norm_02_takes(p, dtype, n, variant):
    return True  # past MAX_FUSED_N the forward streams rows in chunks (deep dive 21's kernel), the backward in torch


def layer_norm_locks_24(p, dtype, n, variant):
    x, dy, dx = (matrix(n, dtype) for _ in range(3))
    w, dwdb = torch.empty(n, device=DEVICE, dtype=dtype), torch.empty(2, n, device=DEVICE)
    mean, rstd = (torch.empty(len(x), device=DEVICE) for _ in range(2))
    launcher = p["backward_classic"] if variant == "classic" else p["backward_persistent"]
    launcher(x, dy, dx, w, mean, rstd, dwdb)


def layer_norm_locks_24_takes(p, dtype, n, variant):
    size = torch.empty((), dtype=dtype).element_size()
    if variant == "classic":
        return triton.next_power_of_2(n) * size <= 65536  # backward_classic refuses longer rows
    return n <= p["MAX_BWD_FUSED_N"]  # backward_persistent refuses longer rows


def row_sums_03(p, dtype, n, variant):
    """The row-sum page's step 1 (the drop-in that launches it, and the whole sum, are the next page's)."""
    x = matrix(n, dtype)
    p["sum_rows"](x, torch.empty(len(x), device=DEVICE, dtype=dtype))


def sums_03(p, dtype, n, variant):
    if variant == "rows":
        p["reduce_sum"](matrix(n, dtype), dim=1)
        return
    x = torch.empty(n, device=DEVICE, dtype=dtype)
    p["sum_vector"](x, torch.empty(1, device=DEVICE, dtype=dtype))  # the drop-in's persistent design
    p["reduce_sum"](x)


def rms_norm_04(p, dtype, n, variant):
    """04_rms_norm_operator's drop-in, forward and backward."""
    x = matrix(n, dtype, grad=True)
    w = torch.empty(n, device=DEVICE, dtype=dtype, requires_grad=True) if variant == "weight" else None
    gradients(p["rms_norm"](x, (n,), w), [x, w])


def rms_norm_04_takes(p, dtype, n, variant):
    return True  # past the fused rows the drop-in streams them in chunks (deep dive 41's kernels)


def rms_norm_forward_04(p, dtype, n, variant):
    """The forward page's step 1 (its drop-in, forward and backward, is the operator page's)."""
    x = matrix(n, dtype)
    w = torch.empty(n, device=DEVICE, dtype=dtype) if variant == "weight" else None
    p["rms_norm_rows_forward"](x, w, torch.empty_like(x), torch.empty(len(x), device=DEVICE), 1e-6)


def rms_norm_forward_04_takes(p, dtype, n, variant):
    return n * dtype.itemsize <= p["MAX_ROW_BYTES"]  # the rows step 1 holds whole


def rms_norm_backward_04(p, dtype, n, variant):
    """The backward page's step 2, as the drop-in's backward launches it (the drop-in is the operator page's)."""
    x = matrix(n, dtype)
    w = torch.empty(n, device=DEVICE, dtype=dtype)  # the drop-in gives the kernel ones where there is no weight
    p["rms_norm_rows_backward"](x, w, torch.empty(len(x), device=DEVICE), torch.empty_like(x), torch.empty_like(x))


def loss_06(p, dtype, n, variant):
    """The first page's launcher of the loss alone (the loss and its gradient are the next page's)."""
    logits = matrix(n, dtype)
    p["loss_rows"](logits, torch.randint(0, n, (len(logits),), device=DEVICE))


def cross_entropy_06(p, dtype, n, variant):
    """The second page's launcher, weighted, as the drop-in calls it: the loss and its gradient, or the loss alone (the
    drop-in, with its backward, is the next page's)."""
    logits = matrix(n, dtype)
    target = torch.randint(0, n, (len(logits),), device=DEVICE)
    dx = torch.empty_like(logits) if "forward" not in variant else None
    p["cross_entropy_rows"](logits, target, torch.rand(n, device=DEVICE), -100, True, dx)


def cross_entropy(p, dtype, n, variant):
    """06_cross_entropy_backward's and 61's drop-in, weighted: with a gradient, without and with label smoothing (61
    splits rows only without; 06 hands smoothing to torch, so its variants have none), or the forward alone."""
    logits = matrix(n, dtype, grad="forward" not in variant)
    target = torch.randint(0, n, (len(logits),), device=DEVICE)
    smoothing = 0.1 if "label smoothing" in variant else 0.0
    loss = p["cross_entropy"](logits, target, weight=torch.rand(n, device=DEVICE), label_smoothing=smoothing)
    if logits.requires_grad:
        torch.autograd.grad(loss, logits)


def vocab_parallel_62(p, dtype, n, variant):
    """62's launches on one rank's slice of n columns (of 4 ranks), weighted, without and with label smoothing: pass 1,
    pass 2 with the gradient (4 slices merged), 06's one pass on the slice, and the backward's scaling."""
    x, smoothing = matrix(n, dtype), 0.0 if variant == "gradient" else 0.1
    target, weight = torch.randint(0, 4 * n, (len(x),), device=DEVICE), torch.rand(4 * n, device=DEVICE)
    consts, losses, dx = torch.ones(6, device=DEVICE), torch.empty(len(x), device=DEVICE), torch.empty_like(x)
    k, slice_args = 3 + (smoothing > 0), (n, 4 * n, -100, smoothing)
    p["launch_pass"](1, x, target, weight, consts, torch.empty(len(x), k, device=DEVICE), None, None, *slice_args)
    p["launch_pass"](
        2, x, target, weight, consts, torch.empty(4 * len(x), k, device=DEVICE), losses, dx, *slice_args, 4
    )
    p["launch_pass"](3, x, target, weight, consts, consts, losses, dx, 0, n, -100, smoothing)
    p["scale_grad_kernel"][(1,)](dx, losses, len(x), n, dx.stride(0), 1, CHUNK=min(8192, triton.next_power_of_2(n)))


def softmax_rows_11(p, dtype, n, variant):
    x, y, dy, dx = (matrix(n, dtype) for _ in range(4))
    p["softmax_rows"]("forward", (x, y))
    p["softmax_rows"]("backward", (y, dy, dx))


def softmax_staged_12(p, dtype, n, variant):
    p["softmax_forward"](matrix(n, dtype))


def launch_heuristics_13(p, dtype, n, variant):
    x, y, dy, dx = (matrix(n, dtype) for _ in range(4))
    p["run"]("forward", (x, y), persistent=variant == "persistent")
    if n <= p["MAX_FUSED_BWD_N"]:  # the page carries the core's fused backward only
        p["run"]("backward", (y, dy, dx), persistent=variant == "persistent")


def layer_norm_forward(p, dtype, n, variant):
    """21's and 22's forward-only drop-in."""
    w, b = (torch.empty(n, device=DEVICE, dtype=dtype) if variant == "affine" else None for _ in range(2))
    p["layer_norm_forward"](matrix(n, dtype), w, b)


def layer_norm_backward_23(p, dtype, n, variant):
    x, dy, dx = (matrix(n, dtype) for _ in range(3))
    mean, rstd = (torch.empty(len(x), device=DEVICE) for _ in range(2))
    w, dw, db = (torch.empty(n, device=DEVICE, dtype=dtype) if variant == "affine" else None for _ in range(3))
    p["layer_norm_wide_backward"](x, dy, dx, w, mean, rstd, dw, db)


def sums_31(p, dtype, n, variant):
    x = matrix(n, dtype)
    p["sum_rows"](x, torch.empty(len(x), device=DEVICE, dtype=dtype))
    p["sum_cols"](x, torch.empty(n, device=DEVICE, dtype=dtype))
    for design in p["DESIGNS"]:  # the whole sum's designs, the whole-sum page's persistent one among them
        p["sum_vector"](x.view(-1), torch.empty(1, device=DEVICE), design)


def rms_norm_backward_41(p, dtype, n, variant):
    x, dy, dx = (matrix(n, dtype) for _ in range(3))
    w, dw = (torch.empty(n, device=DEVICE, dtype=dtype) if variant == "weight" else None for _ in range(2))
    p["rms_norm_wide_backward"](x, w, torch.empty(len(x), device=DEVICE), dy, dx, dw)
    p["rms_norm_forward"](x, w)  # the chunked forward, at every N (RANGE claims it past 64 KB rows)


def rms_norm_staged_42(p, dtype, n, variant):
    w = torch.empty(n, device=DEVICE, dtype=dtype) if variant == "weight" else None
    p["rms_norm_forward"](matrix(n, dtype), w)


def rms_norm_staged_42_takes(p, dtype, n, variant):
    return dtype != torch.float32 and n <= 32768  # rms_norm_forward refuses the rest (tutorial 04 takes them)


@dataclasses.dataclass(frozen=True)
class Entry:
    drive: object  # drive(page globals, dtype, N, variant): calls the page's entry points
    variants: tuple
    takes: object = None  # takes(page globals, dtype, N, variant): whether the page accepts it (None: all)
    gluon: bool = False
    widths_of: str = None  # the page whose widths its entry points are driven at (None: its own)


CROSS_ENTROPY = ("gradient", "gradient, label smoothing", "forward alone, label smoothing")
# The page -> its entry points. Each page's options are on (weight, bias, their gradients): a flag off only drops loads
PAGES = {
    "01_fused_softmax": Entry(softmax_forward_01, ("",)),
    "01_softmax_backward": Entry(softmax_01, ("",)),
    "02_layer_norm": Entry(layer_norm_forward_02, ("affine",), layer_norm_02_takes),
    "02_layer_norm_backward": Entry(layer_norm_02, ("affine",), layer_norm_02_takes),
    # the drop-in's page claims no N (it measures forward+backward): driven at the backward page's N
    "02_layer_norm_drop_in": Entry(layer_norm_02, ("affine",), layer_norm_02_takes, widths_of="02_layer_norm_backward"),
    "24_layer_norm_backward_locks": Entry(layer_norm_locks_24, ("classic", "persistent"), layer_norm_locks_24_takes),
    "03_parallel_reduction": Entry(row_sums_03, ("rows",)),
    "03_sum_of_all_elements": Entry(sums_03, ("whole tensor", "rows")),
    "04_rms_norm": Entry(rms_norm_forward_04, ("weight",), rms_norm_forward_04_takes),
    "04_rms_norm_backward": Entry(rms_norm_backward_04, ("weight",)),
    "04_rms_norm_operator": Entry(rms_norm_04, ("weight",), rms_norm_04_takes),
    "06_cross_entropy": Entry(loss_06, ("forward alone",)),
    # the second page and the drop-in's claim no N (they measure forward+backward, deep dive 61's): driven at the first
    # page's N
    "06_cross_entropy_and_gradient": Entry(
        cross_entropy_06, ("gradient", "forward alone"), widths_of="06_cross_entropy"
    ),
    "06_cross_entropy_backward": Entry(cross_entropy, ("gradient", "forward alone"), widths_of="06_cross_entropy"),
    "11_softmax_long_rows": Entry(softmax_rows_11, ("",)),
    "12_softmax_staged_gluon": Entry(softmax_staged_12, ("",), gluon=True),
    "13_launch_heuristics": Entry(launch_heuristics_13, ("one program per block", "persistent")),
    "21_layer_norm_wide_forward": Entry(layer_norm_forward, ("affine",)),
    "22_layer_norm_staged_gluon": Entry(layer_norm_forward, ("affine",), gluon=True),
    "23_layer_norm_wide_backward": Entry(layer_norm_backward_23, ("affine",)),
    "31_reduction_rows_and_columns": Entry(sums_31, ("",)),
    "41_rms_norm_wide_backward": Entry(rms_norm_backward_41, ("weight",)),
    "42_rms_norm_staged_gluon": Entry(rms_norm_staged_42, ("weight",), rms_norm_staged_42_takes, True),
    "61_cross_entropy_split_rows": Entry(cross_entropy, CROSS_ENTROPY),
    "62_cross_entropy_vocab_parallel": Entry(vocab_parallel_62, ("gradient", "gradient, label smoothing")),
}


def toolchain_missing(entry):
    """Why this machine cannot compile the page's kernels for an NVIDIA GPU, or None."""
    for tool in ("ptxas", "cuobjdump"):
        try:
            path = getattr(triton.knobs.nvidia, tool).path
        except (AttributeError, RuntimeError, OSError) as error:  # a Triton without its NVIDIA tools
            return f"Triton's {tool} is not available here ({type(error).__name__}: {error})"
        if not path or not os.path.exists(path):
            return f"Triton's {tool} is not available here"
    if entry.gluon:
        try:
            importlib.import_module("triton.experimental.gluon")
        except ImportError as error:
            return f"this Triton has no Gluon ({error})"
    return None


@dataclasses.dataclass(frozen=True)
class Context:
    gpu: str
    dtype: str
    n: int
    variant: str


def capture(page, entry, compiler, gpus=tuple(GPU_STAND_INS)):
    """[(Context, Launch, grid)]: every launch the page's entry points make, on each of ``gpus`` (every stand-in GPU),
    dtype, N and variant."""
    swept = load_tutorial(entry.widths_of) if entry.widths_of else page
    recorder, ns, idle = Recorder(page, compiler), widths(swept), []
    for gpu in gpus:
        with as_if_on(page, gpu, recorder):
            for dtype in DTYPES:
                for n in ns:
                    for variant in entry.variants:
                        if entry.takes is not None and not entry.takes(page.data, dtype, n, variant):
                            continue
                        recorder.context = Context(gpu, str(dtype).removeprefix("torch."), n, variant)
                        before = len(recorder.launches)
                        entry.drive(page.data, dtype, n, variant)
                        if len(recorder.launches) == before:
                            idle.append(recorder.context)
    assert not idle, f"{page.path.name}: these calls of its entry points launched no kernel: {idle[:5]}"
    left = [name for name, k in page.data.items() if isinstance(k, KernelInterface) and "run" in vars(k)]
    assert page.data["ON_GPU"] == torch.cuda.is_available() and not left, "the page was not put back as it was loaded"
    return recorder.launches


def describe(launch):
    return f"{launch.kernel}({', '.join(f'{k}={v}' for k, v in json.loads(launch.kwargs).items())})"


@pytest.mark.parametrize("stem", sorted(PAGES))
def test_every_launch_fits_the_gpus(stem, compiler):
    """Each launch the page's entry points choose on each stand-in GPU asks for no more shared memory and registers
    than that GPU has, and compiles."""
    entry = PAGES[stem]
    if not any(p.stem == stem for p in TUTORIALS):
        pytest.fail(f"tutorials/**/{stem}.py is gone: update PAGES")
    why = toolchain_missing(entry)
    if why:
        pytest.skip(why)
    page = load_tutorial(stem)
    launches = capture(page, entry, compiler)
    compiler.compile_all((launch, COMPILED_FOR[GPU_STAND_INS[context.gpu]["cap"]]) for context, launch, _ in launches)
    problems = {}  # (kernel call, what, asked, limit) -> [Context]
    for context, launch, _ in launches:
        cap = GPU_STAND_INS[context.gpu]["cap"]
        figures = compiler.figures(launch, COMPILED_FOR[cap])
        found = [("error", figures["error"], COMPILED_FOR[cap])] if "error" in figures else usage(figures, TARGETS[cap])
        for what, asked, limit in found:
            problems.setdefault((describe(launch), what, asked, limit), []).append(context)
    lines = []
    for (call, what, asked, limit), contexts in sorted(problems.items(), key=lambda item: str(item[0])):
        targets = "/".join(f"sm_{cap}" for cap in sorted({GPU_STAND_INS[c.gpu]["cap"] for c in contexts}))
        gpus = ", ".join(sorted({c.gpu for c in contexts}))
        where = sorted({(c.dtype, c.variant, c.n) for c in contexts})
        cases = "; ".join(f"{d}{f' ({v})' if v else ''} N = {n:,}" for d, v, n in where[:12])
        more = f" and {len(where) - 12} more" if len(where) > 12 else ""
        if what == "error":
            lines.append(f"{stem}: {call} does not compile for sm_{limit} ({gpus}): {asked}\n    at {cases}{more}")
        else:
            lines.append(
                f"{stem}: {call} on {targets} ({gpus}): asks {asked:,} {what}, the limit is {limit:,}\n"
                f"    at {cases}{more}"
            )
    lines += compiled_apart(stem, launches, compiler)
    heading = f"{stem}: {len(lines)} of its launches do not fit the GPU that chose them (expected each to fit):"
    assert not lines, "\n".join([heading, *lines])


def compiled_apart(stem, launches, compiler):
    """Where a target compiled as another (COMPILED_FOR) gives the page's launch of the most shared memory on its GPUs
    another figure when compiled for itself: the merging is wrong there."""
    found = []
    for cap, into in COMPILED_FOR.items():
        chosen = {launch for context, launch, _ in launches if GPU_STAND_INS[context.gpu]["cap"] == cap}
        merged = {launch: compiler.figures(launch, into) for launch in chosen}
        candidates = sorted(
            (f["shared"] + f["static"], str(launch), launch) for launch, f in merged.items() if "error" not in f
        )
        if cap == into or not candidates:
            continue
        shared, _, launch = candidates[-1]
        own = compiler.figures(launch, cap)
        if "error" in own or own["shared"] + own["static"] != shared:
            found.append(
                f"{stem}: {describe(launch)} compiled for sm_{cap} asks "
                f"{own.get('error') or own['shared'] + own['static']} bytes of shared memory, for sm_{into} "
                f"{shared}: sm_{cap} no longer compiles as sm_{into} (COMPILED_FOR)"
            )
    return found


TOY = """import triton
import triton.language as tl


@triton.jit
def staged_sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in tl.range(0, n, BLOCK, num_stages=STAGES):  # the next STAGES - 1 blocks staged in shared memory
        acc += tl.load(x_ptr + start + offs, mask=start + offs < n, other=0.0)
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, axis=0))
"""


def test_a_launch_over_a_gpus_shared_memory_is_caught(compiler, tmp_path):
    """The check itself: a loop staging blocks of 64 KB in shared memory fits an H100 (227 KB a block) and not an
    RTX 4090 (99 KB), as compiled by the worker the page tests use; and the targets compiled as one (COMPILED_FOR) ask
    the same shared memory."""
    page = tmp_path / "toy.py"
    page.write_text(TOY, encoding="utf-8")
    tensor = {"tensor": "float32", "aligned": True}
    launch = Launch(
        str(page),
        len(TOY),
        "staged_sum_kernel",
        TOY.splitlines().index("@triton.jit") + 1,
        json.dumps([tensor, tensor, 2**20]),
        json.dumps({"BLOCK": 16384, "STAGES": 3, "num_warps": 8}),
    )
    on = {cap: compiler.figures(launch, cap) for cap in TARGETS}
    assert not [f for f in on.values() if "error" in f], on
    assert [what for what, *_ in usage(on[89], TARGETS[89])] == ["bytes of shared memory a block"], on[89]
    assert usage(on[90], TARGETS[90]) == [], on[90]
    for cap, into in COMPILED_FOR.items():  # the targets compiled as another ask the same of their GPUs
        assert on[cap]["shared"] + on[cap]["static"] == on[into]["shared"] + on[into]["static"], (cap, into, on)


# ----------------------------------------------------------------------------------------------------------------------
# What the core pages choose on an H100 and an H200, pinned


PINNED = pathlib.Path(__file__).with_name("pinned_launches.json")
PINNED_GPUS = ("H100 SXM", "H200")
PINNED_PAGES = (
    "01_fused_softmax",
    "01_softmax_backward",
    "02_layer_norm",
    "02_layer_norm_backward",
    "03_parallel_reduction",
    "03_sum_of_all_elements",
    "04_rms_norm",
    "04_rms_norm_operator",
    "06_cross_entropy",
    "06_cross_entropy_and_gradient",
    "06_cross_entropy_backward",
)


def chosen_launches(stem, compiler):
    """{"gpu | dtype | variant | N": ["kernel(meta) grid", ...]}: what the page's entry points launch on each of
    PINNED_GPUS at every width the resource test sweeps."""
    chosen = {}
    for context, launch, grid in capture(load_tutorial(stem), PAGES[stem], compiler, PINNED_GPUS):
        key = f"{context.gpu} | {context.dtype} | {context.variant} | N = {context.n}"
        chosen.setdefault(key, []).append(f"{describe(launch)} grid={list(grid)}")
    return chosen


@pytest.mark.parametrize("stem", PINNED_PAGES)
def test_launches_on_an_h100_and_an_h200_are_pinned(stem, compiler):
    """The launches a core page chooses on an H100 (whose figures the site's first builds measured) and on an H200 are
    the ones tests/pinned_launches.json holds: a config change that moves one shows here, GPU by GPU, and is made on
    purpose (rewrite the file with SOL_PIN_LAUNCHES=1 and say in the commit what was measured)."""
    why = toolchain_missing(PAGES[stem])
    if why:
        pytest.skip(why)
    chosen = chosen_launches(stem, compiler)
    with filelock.FileLock(os.path.join(tempfile.gettempdir(), "sol_pinned_launches.lock")):
        pinned = json.loads(PINNED.read_text(encoding="utf-8")) if PINNED.exists() else {}
        if os.environ.get("SOL_PIN_LAUNCHES") == "1":
            pinned[stem] = chosen
            PINNED.write_text(json.dumps(pinned, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    assert stem in pinned, f"{stem}: not pinned in {PINNED.name}; run with SOL_PIN_LAUNCHES=1"
    moved = [
        f"{key}: {pinned[stem].get(key)} -> {value}" for key, value in chosen.items() if pinned[stem].get(key) != value
    ]
    gone = [key for key in pinned[stem] if key not in chosen]
    assert not moved and not gone, f"{stem}: launches moved from {PINNED.name}:\n" + "\n".join((moved + gone)[:20])
