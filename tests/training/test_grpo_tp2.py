"""One GRPO step on two ranks (``rlk_models.testing.grpo_tp2``) on CPU: vLLM at
tensor_parallel_size=2 (external_launcher, gloo) rolls out, FSDP2 trains on half the batch per
rank, the gathered weights are pushed back into both engine shards; the trainer's log-probs equal
the TP=2 rollout's bit for bit before the update and again after the sync. The same script runs
on two GPUs over NCCL (``PART=x2 bash scripts/device_sweep.sh``)."""

import json
import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU/gloo run; two GPUs: scripts/device_sweep.sh")


def test_grpo_step_tp2_rollout_fsdp2_train_sync(checkpoints, tmp_path):
    pytest.importorskip("vllm")
    ckpt = checkpoints["qwen3"][1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "rlk_models.testing.grpo_tp2",
           str(ckpt), "--out", str(tmp_path), "--steps", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "0|1", "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    steps = json.loads((tmp_path / "grpo_tp2.json").read_text())["steps"]
    assert [s["step"] for s in steps] == [0, 1]
    for s in steps:
        assert s["world"] == 2 and s["tokens"] > 300, s
        assert s["mismatch_count"] == 0 and s["max_abs_diff"] == 0.0, s
    assert steps[0]["ratio_min"] == steps[0]["ratio_max"] == 1.0
    # the check after the sync runs on new weights (the matrices move; norm weights at 1.0 move less
    # than one bf16 step at this learning rate)
    assert steps[0]["pushed"] > steps[0]["changed"] >= 8, steps[0]
