"""Run TRL GRPO with a colocated in-process vLLM (CPU) on one checkpoint; print the per-step
parity records and TRL's sampling metrics as one JSON line (tests/integrations/test_trl.py)."""

import json
import sys

from rlk_models.rollout.engine import in_process_env

in_process_env()  # TRL's colocated engine runs in this process; set before trl imports vLLM

from tests.integrations.test_trl import _train  # noqa: E402

if __name__ == "__main__":
    ckpt, out = sys.argv[1], sys.argv[2]
    from pathlib import Path

    trainer, moved = _train(ckpt, Path(out), steps=3, use_vllm=True, vllm_mode="colocate",
                            vllm_max_model_length=64, vllm_gpu_memory_utilization=0.3)
    trl_metrics = [{k: v for k, v in h.items() if k.startswith(("sampling/", "rlk/sync"))}
                   for h in trainer.state.log_history if any(k.startswith("sampling/") for k in h)]
    print("RESULT " + json.dumps({"parity": trainer.parity_log, "trl": trl_metrics, "moved": moved}), flush=True)
