"""FSDP2 training of the rlk class on CPU (gloo processes; ``rlk_models.testing.fsdp_check``):
bf16 compute over fp32 masters gives each rank the bf16 model's log-probs bitwise, gradients are
identical run to run, and 2 ranks with one micro-batch each give the gradient of 1 rank
accumulating both in order."""

import json
import subprocess
import sys

import pytest
import torch


def _check(ckpt, out, *args):
    cmd = [sys.executable, "-m", "rlk_models.testing.fsdp_check", str(ckpt), "--out", str(out), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    # FSDP2 warns when a wrapped module returns a view (an in-place op on it would skip the
    # pre-backward all-gather); the decoder layers return their own tensors
    assert "returned a view tensor" not in p.stderr, p.stderr[-4000:]


@pytest.mark.parametrize("name", ["qwen3", "qwen3_tied"])
def test_fsdp2_forward_grads_and_accumulation(checkpoints, tmp_path, name):
    ckpt = checkpoints[name][1]
    _check(ckpt, tmp_path, "--spawn", "2")
    _check(ckpt, tmp_path, "--spawn", "1", "--accumulate", "2")
    for world in (1, 2):
        res = json.loads((tmp_path / f"fsdp_check_w{world}.json").read_text())
        assert res["forward_equals_bf16_model"] and res["grads_run_to_run"], res
    two, one = (torch.load(tmp_path / f"grads_w{w}.pt") for w in (2, 1))
    assert two.keys() == one.keys() and len(two) > 10
    for k in two:
        assert torch.equal(two[k], one[k]), k
        assert bool(two[k].abs().sum() > 0), k  # every parameter really got a gradient
