"""TRL's GRPOTrainer with an rlk checkpoint (``rlk_models.integrations.trl.RLKGRPOTrainer``, CPU):
over a few steps the rollout's log-probs of every sampled token equal the trainer's (importance
ratio exactly 1 before each update) -- rolling out with ``generate()`` (``use_vllm=False``) and
with TRL's colocated vLLM engine (TRL's own importance-sampling metrics say so too) -- and the
same trainer on the stock transformers checkpoint with the same weights shows the drift this
package removes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from rlk_models.integrations.trl import RLKGRPOTrainer  # noqa: E402


def _train(model_dir, tmp_path, steps=3, trainer_kw=None, **overrides):
    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token or tok.unk_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    prompts = [f"{a} plus {b} is" for a in range(4) for b in range(4)]
    ds = datasets.Dataset.from_dict({"prompt": prompts})
    kw = {"temperature": 1.0, "max_completion_length": 8, **overrides}
    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4,
                          max_steps=steps, learning_rate=1e-2, logging_steps=1, report_to="none", use_cpu=True,
                          bf16=False, seed=0, save_strategy="no", beta=0.0, dataloader_num_workers=0,
                          disable_tqdm=True, **kw)

    def reward(completions, **kw):  # longer completions are better: any signal will do
        return [float(len(c)) for c in completions]

    trainer = RLKGRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=ds, processing_class=tok,
                             **(trainer_kw or {}))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    moved = any(not torch.equal(before[n], p) for n, p in model.named_parameters())
    return trainer, moved


def test_grpo_rollout_and_trainer_logprobs_are_identical(checkpoints, tmp_path):
    trainer, moved = _train(checkpoints["qwen3"][1], tmp_path)
    log = trainer.parity_log
    assert len(log) == 3 and moved  # one generation batch per step, and the weights were updated
    for rec in log:
        assert rec["tokens"] > 0
        assert rec["logp_mismatch"] == 0 and rec["logp_max_abs_diff"] == 0.0, rec
        assert rec["ratio_min"] == 1.0 and rec["ratio_max"] == 1.0, rec
    logged = [h for h in trainer.state.log_history if "rlk/logp_mismatch" in h]
    assert logged and all(h["rlk/logp_mismatch"] == 0 for h in logged)


def test_stock_transformers_under_the_same_trainer_drifts(checkpoints, tmp_path):
    trainer, _ = _train(checkpoints["qwen3"][0], tmp_path, steps=3, max_completion_length=16)
    assert sum(r["logp_mismatch"] for r in trainer.parity_log) > 0, trainer.parity_log


def test_temperature_other_than_one_is_refused(checkpoints, tmp_path):
    with pytest.raises(ValueError, match="temperature"):
        _train(checkpoints["qwen3"][1], tmp_path, steps=1, **{"temperature": 0.7})


def test_cuda_graphs_are_refused_without_cuda_or_an_rlk_model(checkpoints, tmp_path):
    for which in (1, 0):  # rlk on the CPU; the stock checkpoint
        with pytest.raises(ValueError, match="cuda_graphs=True needs an rlk model and a CUDA device"):
            _train(checkpoints["qwen3"][which], tmp_path, steps=1, trainer_kw={"cuda_graphs": True})


def test_grpo_with_trls_colocated_vllm_has_ratio_exactly_one(checkpoints, tmp_path):
    """In its own process: TRL's colocate mode starts vLLM in-process (and torch.distributed)."""
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-m", "tests.integrations.trl_colocate_worker", str(checkpoints["qwen3"][1]),
                        str(tmp_path)], capture_output=True, text=True, timeout=900, cwd=root)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, p.stderr[-4000:]
    res = json.loads(lines[-1][7:])
    assert res["moved"] and len(res["parity"]) == 3
    for rec in res["parity"]:  # vLLM's sampled-token log-probs vs the trainer's, before each update
        assert rec["tokens"] > 0 and rec["logp_mismatch"] == 0 and rec["logp_max_abs_diff"] == 0.0, rec
    assert len(res["trl"]) == 3
    for m in res["trl"]:  # TRL's own view of the same thing
        assert m["sampling/sampling_logp_difference/max"] == 0.0, m
        assert m["sampling/importance_sampling_ratio/min"] == 1.0 == m["sampling/importance_sampling_ratio/max"], m
    pushes = [m["rlk/sync_weights_s"] for m in res["trl"] if "rlk/sync_weights_s" in m]
    assert len(pushes) >= 2 and all(s > 0 for s in pushes), res["trl"]  # each update's push, timed


def test_an_rlk_checkpoint_is_recognised_by_path_too(checkpoints):
    from rlk_models.integrations.trl import is_rlk

    hf, rlk = checkpoints["qwen3"]
    assert is_rlk(str(rlk)) and not is_rlk(str(hf)) and not is_rlk("/no/such/checkpoint")
