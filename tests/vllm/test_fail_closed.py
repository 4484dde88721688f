"""The engine side under bad input (issue: fail closed, lose nothing), through the real vLLM
engine on CPU: weight sync refuses wrong shapes, unknown or HF-layout names, missing tensors,
NaN and the wrong dtype before touching the engine, which keeps serving the old weights bit for
bit; the vLLM class refuses an incomplete checkpoint; the CLIs refuse what they cannot serve or
verify with one line on stderr, before starting an engine."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from .conftest import ROOT, run_json


def test_push_weights_refuses_bad_sets_and_keeps_the_old_weights(checkpoints):
    (out,) = run_json(["-m", "tests.vllm.worker", "push_refusals", str(checkpoints["qwen3"][1])])
    assert out["before"]["mismatch_count"] == 0 and out["before"]["tokens"] > 20, out
    expect = {"wrong_shape": "down_proj.weight: shape", "unknown_name": "layers.9.mlp.down_proj.weight: not a tensor",
              "hf_layout": "fused qkv_proj", "missing_one": "missing 1 tensor(s): model.layers.1.mlp.down_proj",
              "nan": "down_proj.weight: has NaN", "wrong_dtype": "dtype float32, the engine runs bfloat16"}
    for case, needle in expect.items():
        r = out["refused"][case]
        assert r["error"] and needle in r["error"] and "still serves its old weights" in r["error"], (case, r)
        assert r["mismatch_count"] == 0, (case, r)  # the engine's bits are the old model's
    assert out["good_push"]["tensors"] > 0 and out["good_push"]["mismatch_count"] == 0, out


def test_push_a_tied_models_state_dict(checkpoints):
    (out,) = run_json(["-m", "tests.vllm.worker", "push_state_dict", str(checkpoints["qwen3_tied"][1])])
    assert out["tied"] and out["tensors"] > 0 and out["tokens"] > 20 and out["mismatch_count"] == 0, out


def test_check_weights_names_every_problem_at_once(checkpoints):
    import torch
    from transformers import AutoConfig

    from rlk_models.conversion.maps import rlk_tensor_shapes
    from rlk_models.rollout.sync import WeightSyncError, check_weights

    expected = rlk_tensor_shapes(AutoConfig.from_pretrained(checkpoints["qwen3"][1]))
    good = [(n, torch.zeros(s, dtype=torch.bfloat16)) for n, s in expected.items()]
    check_weights(good, expected, torch.bfloat16)  # a complete, well-formed set passes
    bad = good[1:] + [good[1], ("extra.weight", good[2][1])]
    with pytest.raises(WeightSyncError) as e:
        check_weights(bad, expected, torch.bfloat16)
    text = str(e.value)
    assert f"missing 1 tensor(s): {good[0][0]}" in text and f"{good[1][0]}: given twice" in text
    assert "extra.weight: not a tensor" in text


def finite_cases(device="cpu"):
    """Tensors for ``all_finite``: finite ones of every float dtype, a NaN, +-inf, and finite ones whose L1 norm
    overflows its sum (fp16 values near 65504: the sum is fp32 and holds them; fp32 values near 3e38: it does not)."""
    import torch

    g = torch.Generator().manual_seed(0)
    cases = [torch.randn(64, 48, generator=g).to(dt) for dt in (torch.bfloat16, torch.float16, torch.float32,
                                                               torch.float64)]
    cases += [torch.full((4096,), 6e4, dtype=torch.float16), torch.full((8,), 3e38), torch.full((8,), 1e308,
                                                                                                 dtype=torch.float64)]
    for bad in (float("nan"), float("inf"), float("-inf")):
        for dt in (torch.bfloat16, torch.float32, torch.float64):
            t = torch.randn(33, generator=g).to(dt)
            t[17] = bad
            cases.append(t)
    cases.append(torch.empty(0, 5))
    return [t.to(device) for t in cases]


@pytest.mark.parametrize("by_norms", [False, True])
def test_all_finite_is_the_element_wise_check(by_norms):
    """push_weights' finiteness check, both ways it runs (CUDA: by multi-tensor L1 norms, a non-finite norm confirmed
    element-wise; CPU: element-wise): True exactly where every value is finite -- a finite tensor whose norm
    overflows is not refused."""
    import torch

    from rlk_models.rollout.sync import all_finite

    cases = finite_cases()
    assert all_finite(cases, by_norms=by_norms) == [bool(torch.isfinite(t).all()) for t in cases]
    assert all_finite([], by_norms=by_norms) == []
    assert all_finite(cases, by_norms=by_norms).count(False) == 9  # the three bad values in three dtypes


@pytest.mark.parametrize("drop", ["model.embed_tokens.weight", "model.layers.0.self_attn.qkv_proj.weight",
                                  "lm_head.weight"])
def test_vllm_class_refuses_an_incomplete_checkpoint(checkpoints, tmp_path, drop):
    ck = tmp_path / "ck"
    shutil.copytree(checkpoints["qwen3"][1], ck)
    f = next(ck.glob("*.safetensors"))
    sd = load_file(f)
    del sd[drop]
    save_file(sd, str(f), metadata={"format": "pt"})
    (out,) = run_json(["-m", "tests.vllm.worker", "vllm_load", str(ck)])
    assert out["error"] and "lacks 1 tensor(s)" in out["error"] and drop in out["error"], out


def _cli(module, *args):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def test_cli_refusals_are_one_line_and_start_no_engine(checkpoints, tmp_path):
    hf, rlk = checkpoints["qwen3"]
    no_tok = tmp_path / "no-tokenizer"
    no_tok.mkdir()
    for f in rlk.iterdir():
        if f.suffix in (".json", ".safetensors") and not f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy2(f, no_tok / f.name)
    cases = [
        ("rlk_models.cli.verify", [str(hf)], "is not an rlk checkpoint"),
        ("rlk_models.cli.verify", ["/nonexistent/Qwen/Qwen3-8B"], "no such checkpoint directory"),
        ("rlk_models.cli.serve", [str(hf)], "is not an rlk checkpoint"),
        ("rlk_models.cli.grpo", ["--steps", "0"], "--steps: must be >= 1"),
        ("rlk_models.cli.grpo", ["--steps", "-1"], "--steps: must be >= 1"),
        ("rlk_models.cli.grpo", ["--group-size", "0"], "--group-size: must be >= 2"),
        ("rlk_models.cli.grpo", ["--checkpoint", str(no_tok)], "no tokenizer files"),
        ("rlk_models.cli.grpo", ["--checkpoint", str(rlk), "--runs", "rlk,stock"], "the stock contrast needs"),
        ("rlk_models.cli.grpo", ["--runs", "rlk,ppo"], "--runs: a comma list of rlk, stock"),
        ("rlk_models.cli.grpo", ["--sft-noise", "1"], "--sft-noise must be in [0, 1)"),
    ]
    if not torch.cuda.is_available():
        cases.append(("rlk_models.cli.verify", [str(rlk), "--configs", "budget_768_decode_512"],
                      "configuration(s) ['budget_768_decode_512'] need a CUDA GPU"))
    for module, args, needle in cases:
        r = _cli(module, *args)
        assert r.returncode == 2, (module, args, r.stdout, r.stderr[-2000:])
        assert needle in r.stderr and "Traceback" not in r.stderr and r.stdout == "", (module, args, r.stderr)
    r = _cli("rlk_models.cli.verify", str(hf), "-v")
    assert "Traceback" in r.stderr  # -v shows it


def test_verify_runs_without_tokenizer_files_and_json_stdout_is_clean(checkpoints, tmp_path):
    rlk = checkpoints["qwen3"][1]
    ck = tmp_path / "trainer-output"  # a trainer's intermediate checkpoint: config + weights
    ck.mkdir()
    for f in ("config.json", *[p.name for p in rlk.glob("*.safetensors")]):
        shutil.copy2(rlk / f, ck / f)
    r = subprocess.run([sys.executable, "-m", "rlk_models.cli.verify", str(ck), "--json", "--configs",
                        "batches_16_3_temp1"], capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT), "VLLM_CPU_KVCACHE_SPACE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in r.stdout.splitlines()]  # every stdout line is JSON: logs went to stderr
    assert len(rows) == 1 and rows[0]["mismatch_count"] == 0 and rows[0]["tokens"] > 100, rows
