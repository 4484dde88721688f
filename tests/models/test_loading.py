"""The training class's from_pretrained under bad or unusual checkpoints (issue: fail closed, lose
nothing): an incomplete or extra tensor set is refused naming the tensors (transformers alone
would fill missing ones with random init); strict mode works with an empty self-test cache;
fp32 master weights load from a bf16 checkpoint with a warning saying what parity needs; a
missing, null, empty or non-dict fingerprint is a clear error."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from rlk_models.ops.fingerprint import FingerprintMismatch


def _copy(ckpt, dst, edit_tensors=None, edit_config=None):
    shutil.copytree(ckpt, dst)
    if edit_tensors:
        f = next(dst.glob("*.safetensors"))
        save_file(edit_tensors(load_file(f)), str(f), metadata={"format": "pt"})
    if edit_config:
        cfg = json.loads((dst / "config.json").read_text())
        edit_config(cfg)
        (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_missing_tensor_is_refused_naming_it(checkpoints, tmp_path):
    name = "model.layers.1.mlp.down_proj.weight"
    ck = _copy(checkpoints["qwen3"][1], tmp_path / "ck", edit_tensors=lambda sd: {k: v for k, v in sd.items()
                                                                               if k != name})
    with pytest.raises(ValueError, match=f"1 missing tensor\\(s\\): {name}"):
        AutoModelForCausalLM.from_pretrained(ck, dtype=torch.bfloat16)


def test_extra_or_hf_layout_tensor_is_refused_naming_it(checkpoints, tmp_path):
    extra = "model.layers.0.self_attn.q_proj.weight"
    ck = _copy(checkpoints["qwen3"][1], tmp_path / "ck",
               edit_tensors=lambda sd: {**sd, extra: torch.zeros(4, 4, dtype=torch.bfloat16)})
    with pytest.raises(ValueError, match=f"1 unexpected tensor\\(s\\): {extra}.*qkv_proj"):
        AutoModelForCausalLM.from_pretrained(ck, dtype=torch.bfloat16)


def test_strict_mode_with_an_empty_self_test_cache(checkpoints, tmp_path, monkeypatch):
    monkeypatch.setenv("RLK_CACHE_DIR", str(tmp_path / "cache"))  # nothing cached: the self-test runs at load
    model = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3"][1], dtype=torch.bfloat16, rlk_strict=True)
    assert list((tmp_path / "cache").glob("selftest-reference-*.json"))
    ids = torch.tensor([[1, 2, 3, 4]])
    assert torch.isfinite(model.token_logprobs(ids)).all()


def test_fp32_master_weights_from_a_bf16_checkpoint_load_with_a_warning(checkpoints):
    with pytest.warns(UserWarning, match="computes in float32; the checkpoint was converted for bfloat16.*"
                                         "only when it computes in bfloat16"):
        model = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3"][1], dtype=torch.float32)
    assert next(model.parameters()).dtype == torch.float32
    bf16 = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3"][1], dtype=torch.bfloat16)
    assert all(torch.equal(a.to(torch.bfloat16), b) for a, b in zip(model.parameters(), bf16.parameters()))


@pytest.mark.parametrize("value, needle", [(None, "has no rlk_fingerprint"), ("absent", "has no rlk_fingerprint"),
                                           ({}, "must be a non-empty object"), ("bf16", "must be a non-empty object"),
                                           ([1], "must be a non-empty object")])
def test_missing_or_malformed_fingerprint_is_a_clear_error(checkpoints, tmp_path, value, needle):
    def edit(cfg):
        if value == "absent":
            del cfg["rlk_fingerprint"]
        else:
            cfg["rlk_fingerprint"] = value

    ck = _copy(checkpoints["qwen3"][1], tmp_path / "ck", edit_config=edit)
    with pytest.raises(FingerprintMismatch, match=needle):
        AutoModelForCausalLM.from_pretrained(ck, dtype=torch.bfloat16)
    AutoModelForCausalLM.from_pretrained(ck, dtype=torch.bfloat16, rlk_check_fingerprint=False)  # the opt-out
