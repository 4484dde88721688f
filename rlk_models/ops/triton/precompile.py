"""Warm starts for the Triton backend: the kernel compiles a process makes, recorded once and replayed in parallel.

A process compiles each kernel variant on its first call, one after another on the host. The engine meets most of
its variants before serving: its profile run and its CUDA-graph capture take every layer at every captured size
(147 sizes up to 2048 tokens, ~70 matmul variants at 8B). On a machine whose Triton cache is cold that is minutes:
on a fresh H200 the 8B engine's start ran past 230 s, against 38 s once the cache was warm and stock vLLM's 100 s
cold (docs/benchmarks.md, session 66).

Triton can replay a compile from the "specialization data" its JIT hooks see (``JITFunction.preload``: the
signature, constexprs, argument attributes and options of one variant, as JSON) and can run compiles on an
executor (``triton.AsyncCompileMode``); its MLIR passes and ptxas run outside the GIL, so threads overlap them.
Here:

- ``RLK_TRITON_RECORD=PATH``: every rlk kernel variant this process compiles is appended to PATH, one JSON line
  each (``record_to``; vLLM's workers read the variable when they import this package);
- ``preload(path)``: compiles a file's variants on a thread pool into each kernel's in-process cache (and Triton's
  cache on disk); a later call of the same variant runs without compiling;
- a GPU model's recorded file ships in the package (``kernels/<device name>.jsonl``, named as the launch files
  are) and ``preload_device_kernels`` replays it when the vLLM class is built (``RLK_TRITON_PRELOAD=0``: off;
  ``=PATH``: that file instead).

A variant changes no bits: it is the same kernel's code for arguments of the same kinds, compiled before it is
called rather than at the call. A line that no longer compiles (its kernel renamed or gone, a recorded constexpr the
kernel no longer accepts) is skipped with a warning: its variant compiles at first use, as without the file. A
kernel whose parameters changed may still compile from an old line, into a variant nothing calls: record the file
anew after changing a kernel (``tests/ops/triton/test_precompile.py`` checks the packaged files' parameters).

``python -m rlk_models.ops.triton.precompile [FILE] [--gpu NAME]`` fills Triton's cache on this machine, with its
GPU or without one (``compile_only``: a driver that compiles for sm_90 and launches nothing), e.g. while a container
image is built.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from .utils import device_file

log = logging.getLogger(__name__)

RECORD_ENV = "RLK_TRITON_RECORD"
PRELOAD_ENV = "RLK_TRITON_PRELOAD"
KERNEL_DIR = Path(__file__).with_name("kernels")
PACKAGE = "rlk_models."  # a file may name kernels of this package only: a line is data, never an import of choice


class Variant(NamedTuple):
    """One compiled variant of a kernel: its full name (module.qualname) and Triton's specialization data."""

    kernel: str
    data: str  # JSON, as Triton's JIT hooks serialize it (``JITFunction.preload`` reads it)


class PreloadReport(NamedTuple):
    variants: int  # distinct variants in the file
    compiled: int  # compiled (or loaded from Triton's disk cache) into their kernels' caches
    skipped: list[str]  # "kernel: why" of each variant that could not be replayed
    seconds: float
    workers: int


def read_variants(path) -> list[Variant]:
    """The distinct variants of a recorded file, in file order. A line that is not a variant's JSON, or names a
    kernel outside this package, raises ValueError naming the file and line (nothing is compiled)."""
    path = Path(path)
    seen, out = set(), []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            name, key = obj["name"], obj["key"]
            if not isinstance(name, str) or not isinstance(key, str):
                raise TypeError("name and key must be strings")
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"Triton kernel file {path}, line {i}: not a kernel variant's specialization data "
                             f"({type(e).__name__}: {e})") from None
        if not name.startswith(PACKAGE):
            raise ValueError(f"Triton kernel file {path}, line {i}: kernel {name!r} is not one of {PACKAGE[:-1]}'s")
        if (name, key) not in seen:
            seen.add((name, key))
            out.append(Variant(name, line))
    return out


def _kernel(name: str):
    module, _, attr = name.rpartition(".")
    fn = getattr(importlib.import_module(module), attr, None)
    if fn is None or not hasattr(fn, "preload"):
        raise LookupError(f"no Triton kernel named {attr} in {module}")
    return fn


def _why(v: Variant, e: BaseException) -> str:
    lines = str(e).strip().splitlines()  # a compile error's message ends with its cause, after the source excerpt
    return f"{v.kernel}: {type(e).__name__}: {lines[-1] if lines else ''}"


def _workers(workers: int | None) -> int:
    if workers is not None:
        if workers < 1:
            raise ValueError(f"preload: workers must be >= 1, got {workers}")
        return workers
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(16, cpus))


def preload(path, workers: int | None = None) -> PreloadReport:
    """Compile every variant recorded in ``path`` on ``workers`` threads (default: this process's CPUs, at most 16)
    into its kernel's cache for the current device, Triton's disk cache first (a variant already there is loaded,
    not compiled). Variants that cannot be replayed are skipped and named in the report (and a warning)."""
    import triton

    workers = _workers(workers)
    variants = read_variants(path)
    start, skipped, submitted = time.perf_counter(), [], []
    with ThreadPoolExecutor(workers, thread_name_prefix="rlk-precompile") as pool:
        mode = triton.AsyncCompileMode(pool, ignore_errors=True)
        with mode:
            for v in variants:
                try:
                    submitted.append((v, _kernel(v.kernel).preload(v.data)))
                except Exception as e:  # a stale line: its variant compiles at first use, as without the file
                    skipped.append(_why(v, e))
        for v, fut in submitted:  # the mode finalized each compile that succeeded; name the others
            if getattr(fut, "kernel", True) is None:
                skipped.append(_why(v, fut.future.exception()))
    report = PreloadReport(len(variants), len(variants) - len(skipped), skipped, time.perf_counter() - start,
                           workers)
    if skipped:
        log.warning("Triton kernel file %s: %d of %d variants could not be compiled ahead (each compiles at first "
                    "use instead); first: %s", path, len(skipped), len(variants), skipped[0])
    return report


last_report: PreloadReport | None = None  # preload_device_kernels' last (benchmarks/cold_start.py reads it)


def device_kernel_file(name: str) -> Path:
    """The packaged kernel file of the GPU model ``name`` (``torch.cuda.get_device_name``'s), present or not."""
    return device_file(KERNEL_DIR, name, ".jsonl")


def preload_device_kernels(device_name: str | None = None) -> PreloadReport | None:
    """Replay the current GPU model's packaged kernel file (``RLK_TRITON_PRELOAD=PATH``: that file; ``=0``: none).
    None where there is nothing to replay (no file for this GPU, or off)."""
    global last_report
    choice = os.environ.get(PRELOAD_ENV, "")
    if choice == "0":
        return None
    if choice:
        path = Path(choice)
        if not path.is_file():
            raise FileNotFoundError(f"{PRELOAD_ENV}={choice}: no such Triton kernel file")
    else:
        if device_name is None:
            import torch

            device_name = torch.cuda.get_device_name()
        path = device_kernel_file(device_name)
        if not path.is_file():
            return None
    report = last_report = preload(path)
    log.info("rlk: %d Triton kernel variants compiled ahead from %s on %d threads in %.1f s", report.compiled,
             path, report.workers, report.seconds)
    return report


_recording: dict[str, object] = {}  # the file this process records into ("path") and the variants written ("keys")
_record_lock = threading.Lock()


def record_to(path) -> None:
    """Append every variant of an rlk kernel that this process compiles from now on to ``path`` (JSON lines; each
    variant once a process, a line written whole so that processes may share the file; the file and its directory
    are made now). Chains any hook already installed."""
    from triton import knobs

    with _record_lock:
        if _recording:
            if _recording["path"] != str(path):
                raise RuntimeError(f"already recording Triton kernels into {_recording['path']}, not {path}")
            return
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # an unwritable file is refused here, not inside a kernel's compile
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        _recording.update(path=str(path), keys=set())
        previous = knobs.runtime.jit_post_compile_hook

        def hook(**kw):  # Triton's JIT hook arguments: key, repr, fn (module, name, jit_function), compile, ...
            fn = kw["fn"]
            name = f"{fn.module}.{fn.name}"
            if name.startswith(PACKAGE):
                with _record_lock:
                    fresh = (name, kw["key"]) not in _recording["keys"]
                    _recording["keys"].add((name, kw["key"]))
                if fresh:
                    fd = os.open(_recording["path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                    try:
                        os.write(fd, (kw["compile"]["specialization_data"] + "\n").encode())
                    finally:
                        os.close(fd)
            return previous(**kw) if previous is not None else None

        knobs.runtime.jit_post_compile_hook = hook


def record_from_env() -> None:
    """``record_to($RLK_TRITON_RECORD)`` where the variable is set (this package's Triton backend calls it at
    import, so vLLM's worker processes record too)."""
    path = os.environ.get(RECORD_ENV)
    if path:
        record_to(path)


class _CompileOnlyDriver:
    """What Triton's JIT asks of a driver to compile, for an sm_90 GPU that is not here (no launch is possible: the
    JIT is only asked to preload or warm up)."""

    def __init__(self, capability: int = 90):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", capability, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")


@contextlib.contextmanager
def compile_only(capability: int = 90):
    """Triton's JIT compiles for an sm_``capability`` GPU on a machine without one (Triton's ptxas, no driver): for
    ``preload`` and ``warmup`` only."""
    from triton.runtime.driver import driver

    previous = driver._active
    driver.set_active(_CompileOnlyDriver(capability))
    try:
        yield
    finally:
        driver._active = previous


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlk_models.ops.triton.precompile",
                                description="Compile a recorded file's Triton kernel variants into Triton's cache.")
    p.add_argument("file", nargs="?", help="a kernel file (default: the packaged file of --gpu, or of this GPU)")
    p.add_argument("--gpu", help="the GPU model's name as torch.cuda.get_device_name gives it (no GPU here: its "
                                 "kernels are compiled for sm_90)")
    p.add_argument("--workers", type=int, help="compile threads (default: this process's CPUs, at most 16)")
    args = p.parse_args(argv)
    import torch

    if args.file is None:
        name = args.gpu or (torch.cuda.get_device_name() if torch.cuda.is_available() else None)
        if name is None:
            p.error("no GPU here: name one with --gpu, or give a kernel file")
        path = device_kernel_file(name)
        if not path.is_file():
            p.error(f"the package has no kernel file for {name!r} ({path})")
    else:
        path = Path(args.file)
    with contextlib.nullcontext() if torch.cuda.is_available() else compile_only():
        report = preload(path, args.workers)
    print(f"{report.compiled} of {report.variants} variants compiled or found in Triton's cache "
          f"({report.workers} threads, {report.seconds:.1f} s); skipped: {len(report.skipped)}")
    for s in report.skipped:
        print("  skipped", s)
    return 1 if report.skipped else 0


if __name__ == "__main__":
    sys.exit(main())
