"""rlk-convert: bitwise round trip, stock-transformers compatibility, and clear refusals that
leave nothing behind."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from rlk_models.conversion import ConversionError, convert
from rlk_models.testing.tiny import make_tiny_hf_checkpoint


def tensors(path):
    out = {}
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(f, framework="pt") as h:
            out.update({k: h.get_tensor(k) for k in h.keys()})
    return out


def leftovers(parent, keep):
    return sorted(p.name for p in parent.iterdir() if p.name not in keep)


@pytest.mark.parametrize("variant", ["qwen3", "qwen3_tied", "llama3", "llama_bias"])
def test_round_trip_is_bitwise_and_loads_in_transformers(checkpoints, variant, tmp_path):
    hf, rlk = checkpoints[variant]
    back = convert(rlk, tmp_path / "back", to="hf", progress=False)
    a, b = tensors(hf), tensors(back)
    assert a.keys() == b.keys()
    assert all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
    cfg = json.loads((back / "config.json").read_text())
    assert cfg["model_type"] in ("qwen3", "llama") and not any(k.startswith("rlk_") for k in cfg)
    assert (back / "tokenizer.json").exists() and (back / "generation_config.json").exists()
    ids = torch.randint(0, 500, (2, 30), generator=torch.Generator().manual_seed(0))
    m0 = AutoModelForCausalLM.from_pretrained(hf)
    m1 = AutoModelForCausalLM.from_pretrained(back)
    assert type(m1).__name__ == type(m0).__name__
    assert torch.equal(m0(ids).logits, m1(ids).logits)


def test_rlk_checkpoint_layout(checkpoints):
    rlk = checkpoints["qwen3"][1]
    cfg = json.loads((rlk / "config.json").read_text())
    assert cfg["model_type"] == "rlk_qwen3" and cfg["architectures"] == ["RLKQwen3ForCausalLM"]
    assert cfg["rlk_backend"] == "reference"
    names = tensors(rlk)
    assert "model.layers.0.self_attn.qkv_proj.weight" in names and "model.layers.1.mlp.gate_up_proj.weight" in names
    assert not any(".q_proj." in n or ".gate_proj." in n for n in names)


def test_sharded_input_and_output(tmp_path):
    src = tmp_path / "src"
    make_tiny_hf_checkpoint(src, "llama", seed=3)
    m = AutoModelForCausalLM.from_pretrained(src)
    m.save_pretrained(tmp_path / "sharded", max_shard_size="60KB")
    shutil.copy(src / "tokenizer.json", tmp_path / "sharded")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    out = convert(tmp_path / "sharded", tmp_path / "rlk", max_shard_bytes=50_000, progress=False)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    back = convert(out, tmp_path / "back", to="hf", progress=False)
    a, b = tensors(src), tensors(back)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _edit_tensors(path, fn):
    f = path / "model.safetensors"
    t = tensors(path)
    fn(t)
    save_file(t, str(f), metadata={"format": "pt"})


def _edit_config(path, **kw):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(kw)
    (path / "config.json").write_text(json.dumps(cfg))


BAD = {
    "missing tensor": (lambda p: _edit_tensors(p, lambda t: t.pop("model.layers.1.mlp.up_proj.weight")),
                       "missing tensor.*model.layers.1.mlp.up_proj.weight"),
    "unexpected tensor": (lambda p: _edit_tensors(p, lambda t: t.update({"model.extra.weight": torch.zeros(2)})),
                          "unexpected tensor.*model.extra.weight"),
    "wrong shape": (lambda p: _edit_tensors(p, lambda t: t.update(
        {"model.norm.weight": torch.zeros(7, dtype=torch.bfloat16)})), "wrong shape for tensor model.norm.weight"),
    "unsupported architecture": (lambda p: _edit_config(p, model_type="mistral"), "unsupported architecture"),
    "sliding window": (lambda p: _edit_config(p, use_sliding_window=True, sliding_window=8, max_window_layers=0),
                       "sliding"),
    "unknown rope": (lambda p: _edit_config(p, rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}),
                     "rope_type 'yarn'"),
    "moe": (lambda p: _edit_config(p, num_experts=4), "num_experts"),
    "unreadable config": (lambda p: (p / "config.json").write_text("{not json"), "config.json: unreadable JSON"),
    "unreadable weights": (lambda p: (p / "model.safetensors").write_bytes(b"\x00garbage"),
                           "model.safetensors: unreadable safetensors"),
    "pickle weights": (lambda p: ((p / "model.safetensors").unlink(), torch.save({}, p / "pytorch_model.bin")),
                       "pickle .bin"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_names_the_problem_and_leaves_nothing(checkpoints, tmp_path, case):
    src = tmp_path / "src"
    shutil.copytree(checkpoints["qwen3"][0], src)
    BAD[case][0](src)
    with pytest.raises(ConversionError, match=BAD[case][1]):
        convert(src, tmp_path / "dst", progress=False)
    assert leftovers(tmp_path, {"src"}) == []


def test_existing_destination_needs_force(checkpoints, tmp_path):
    hf = checkpoints["qwen3"][0]
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "keep.txt").write_text("mine")
    with pytest.raises(ConversionError, match="exists; pass force"):
        convert(hf, dst, progress=False)
    assert (dst / "keep.txt").read_text() == "mine"
    convert(hf, dst, force=True, progress=False)
    assert not (dst / "keep.txt").exists() and (dst / "model.safetensors").exists()
    assert leftovers(tmp_path, {"dst"}) == []


def test_rlk_to_rlk_is_refused(checkpoints, tmp_path):
    with pytest.raises(ConversionError, match="unsupported architecture: model_type 'rlk_qwen3'"):
        convert(checkpoints["qwen3"][1], tmp_path / "x", progress=False)


def test_cli(checkpoints, tmp_path):
    hf = checkpoints["llama3"][0]
    run = [sys.executable, "-m", "rlk_models.cli.convert"]
    ok = subprocess.run(run + [str(hf), str(tmp_path / "out")], capture_output=True, text=True)
    assert ok.returncode == 0 and (tmp_path / "out" / "config.json").exists(), ok.stderr
    again = subprocess.run(run + [str(hf), str(tmp_path / "out")], capture_output=True, text=True)
    assert again.returncode == 2 and "exists; pass force" in again.stderr
    back = subprocess.run(run + [str(tmp_path / "out"), str(tmp_path / "back"), "--to", "hf",
                                 "--max-shard-size", "40KB"],
                          capture_output=True, text=True)
    assert back.returncode == 0, back.stderr
    assert (tmp_path / "back" / "model.safetensors.index.json").exists()


def test_pickle_weights_convert_with_allow_pickle(checkpoints, tmp_path):
    hf, rlk = checkpoints["llama3"]
    src = tmp_path / "src"
    shutil.copytree(hf, src)
    (src / "model.safetensors").unlink()
    torch.save(tensors(hf), src / "pytorch_model.bin")
    out = convert(src, tmp_path / "out", allow_pickle=True, progress=False)
    a, b = tensors(rlk), tensors(out)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
