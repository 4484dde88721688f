"""The one-process-per-stage protocol of the GPU benchmarks (``vllm_cuda.py``, ``train_step.py``):
a stage prints one ``RESULT {json}`` line (``emit``); the parent runs each stage in a fresh process
(its GPU memory is freed with it), records the result under a tag in a summary it rewrites after
every stage (``Stages``), and prints one line per stage. Standard library only: the parent never
imports torch."""

from __future__ import annotations

import json
import os
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
        t = time.time()
        try:
            p = subprocess.run([sys.executable, self.script, *extra, *self.common], capture_output=True, text=True,
                               timeout=self.limit, env={**os.environ, **(env or {})})
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            res = json.loads(lines[-1][7:]) if lines else {"error": f"exit {p.returncode}",
                                                            "stderr_tail": p.stderr[-2500:]}
        except subprocess.TimeoutExpired:
            res = {"error": f"timed out after {self.limit} s"}
        res["wall_s"] = round(time.time() - t, 1)
        self.summary[tag] = res
        self.save()
        print(f"== {tag}: {json.dumps(res)[:900]}", flush=True)
        return res

    def save(self) -> None:
        self.out_path.write_text(json.dumps(self.summary, indent=1))
