"""How long the rlk engine takes to start where Triton's cache is cold, with and without its kernel file compiled
ahead on threads (``rlk_models.ops.triton.precompile``), and where the cache is warm.

Each run is its own process (``stages.Stages``) with its own Triton cache directory and the engine core in that
process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so the preload's report can be read), on the engine the
throughput benchmark runs (``vllm_cuda.py``: full CUDA graphs up to 2048 tokens, 256 sequences, 16,384 tokens a
step):

- ``cold``: an empty cache, ``RLK_TRITON_PRELOAD=0``, every variant the engine compiles recorded into
  ``kernels_<shape>.jsonl`` beside the caches, copied to ``$OUT`` (``RLK_TRITON_RECORD``: the file to package as
  ``kernels/<GPU>.jsonl``; a later call on the same machine may run ``--runs preload,warm`` with it);
- ``preload``: another empty cache, ``RLK_TRITON_PRELOAD`` = cold's file;
- ``warm``: preload's cache again, the same file (each variant then loads from Triton's cache on disk).

Per run: ``init_s`` (``LLM(...)`` to its return), the first request's seconds (16 tokens), the cache's entries
after, the preload's report (variants, compiled, skipped, seconds, threads). Results to
``$OUT/cold_start_<shape>.json``.

    python benchmarks/cold_start.py --shape 8b
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stages import Stages, emit  # noqa: E402


def stage_engine(a) -> dict:
    from vllm import LLM, SamplingParams

    from rlk_models.ops.triton import precompile
    from rlk_models.rollout.engine import engine_graph_options

    t0 = time.time()
    llm = LLM(model=a.model, dtype="bfloat16", seed=0, max_model_len=560, gpu_memory_utilization=0.85,
              max_num_seqs=256, logprobs_mode="raw_logits", **engine_graph_options(True, True))
    res = {"init_s": round(time.time() - t0, 1)}
    t = time.time()
    llm.generate(["w5 w6 w7 w8"], SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True), use_tqdm=False)
    res["first_request_s"] = round(time.time() - t, 2)
    rep = precompile.last_report
    res["preload"] = None if rep is None else {**rep._asdict(), "skipped": rep.skipped[:5],
                                               "seconds": round(rep.seconds, 1)}
    cache = Path(os.environ["TRITON_CACHE_DIR"])
    res["triton_cache_entries"] = len(list(cache.iterdir())) if cache.is_dir() else 0
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stage", nargs="?", default="all", choices=["all", "ckpt", "engine"])
    ap.add_argument("--shape", default="small")
    ap.add_argument("--runs", default="cold,preload,warm")
    ap.add_argument("--work", default="/tmp/vllm_cuda")
    ap.add_argument("--caches", default="/tmp/cold_start_caches")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--limit", type=float, default=420, help="seconds per run")
    ap.add_argument("--model")
    a = ap.parse_args()
    if a.stage == "ckpt":
        from vllm_cuda import stage_ckpt

        emit(stage_ckpt(a))
        return
    if a.stage == "engine":
        emit(stage_engine(a))
        return
    out = Path(a.out)
    summary = {"shape": a.shape}
    stages = Stages(__file__, out / f"cold_start_{a.shape}.json", summary, ["--shape", a.shape, "--work", a.work],
                    a.limit)
    rlk = Path(a.work) / f"{a.shape}-rlk"
    if not (rlk / "config.json").exists() and "error" in stages.run("ckpt", ["ckpt"]):
        return
    caches = Path(a.caches)
    kernels = caches / f"kernels_{a.shape}.jsonl"
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    for run in a.runs.split(","):
        if run not in ("cold", "preload", "warm"):
            raise SystemExit(f"--runs: unknown run {run!r} (cold, preload, warm)")
        cache = caches / ("cold" if run == "cold" else "preload")  # warm: preload's cache again
        if run != "warm":
            shutil.rmtree(cache, ignore_errors=True)
        run_env = {"TRITON_CACHE_DIR": str(cache), "RLK_TRITON_PRELOAD": str(kernels)}
        if run == "cold":
            kernels.unlink(missing_ok=True)
            run_env.update(RLK_TRITON_PRELOAD="0", RLK_TRITON_RECORD=str(kernels))
        stages.run(run, ["engine", "--model", str(rlk)], env={**env, **run_env})
        if kernels.exists():  # beside the caches (a later call on the same machine replays it), and into $OUT
            shutil.copy(kernels, out / kernels.name)
            summary["kernel_file_lines"] = len(kernels.read_text().splitlines())
            stages.save()


if __name__ == "__main__":
    main()
