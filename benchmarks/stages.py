"""The one-process-per-stage protocol of the GPU benchmarks (``vllm_cuda.py``, ``train_step.py``):
a stage prints one ``RESULT {json}`` line (``emit``); the parent runs each stage in a fresh process
(its GPU memory is freed with it), records the result under a tag in a summary it rewrites after
every stage (``Stages``), and prints one line per stage. Standard library only: the parent never
imports torch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def emit(result: dict) -> None:
    print("RESULT " + json.dumps(result), flush=True)


class Stages:
    """Runs ``python script <extra> <common>`` per stage, ``limit`` seconds each, into ``summary``
    (written to ``out_path`` as JSON after every stage)."""

    def __init__(self, script: str, out_path: Path, summary: dict, common: list[str], limit: float):
        self.script, self.out_path, self.summary, self.common, self.limit = script, out_path, summary, common, limit

    def run(self, tag: str, extra: list[str], env: dict | None = None) -> dict:
        """One stage in its own process group: at the time limit the whole group is killed -- a vLLM
        engine core is a grandchild that would otherwise keep its GPU memory, and every later stage
        would fail to start -- and the stage's stderr so far is kept (``<out>_<tag>.stderr``)."""
        t = time.time()
        err_path = self.out_path.with_name(f"{self.out_path.stem}_{tag}.stderr")
        with open(err_path, "w") as err:
            p = subprocess.Popen([sys.executable, self.script, *extra, *self.common], stdout=subprocess.PIPE,
                                 stderr=err, text=True, env={**os.environ, **(env or {})}, start_new_session=True)
            try:
                out, _ = p.communicate(timeout=self.limit)
                lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
                res = json.loads(lines[-1][7:]) if lines else {"error": f"exit {p.returncode}"}
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
                res = {"error": f"timed out after {self.limit} s"}
        if "error" in res:
            res["stderr_tail"] = err_path.read_text()[-2500:]
        else:
            err_path.unlink()
        res["wall_s"] = round(time.time() - t, 1)
        self.summary[tag] = res
        self.save()
        print(f"== {tag}: {json.dumps(res)[:900]}", flush=True)
        return res

    def save(self) -> None:
        self.out_path.write_text(json.dumps(self.summary, indent=1))
