import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_json(args: list[str], timeout: int = 900, env: dict | None = None) -> list[dict]:
    """Run ``python args...`` in a fresh process (``env``: variables set for it); return the JSON objects it
    printed."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1", PYTHONPATH=path,
               **(env or {}))
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise AssertionError(f"no JSON output (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}")
    return [json.loads(ln) for ln in lines]
