"""Verification and diagnostics: the bisector names a planted non-invariant op, rlk-verify
tells a good checkpoint from a planted one, strict mode refuses a failing self-test, and a
fingerprint mismatch is a clear error in both classes (a dtype-only one warns in the training class)."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlk_models import RLKQwen3Config, RLKQwen3ForCausalLM
from rlk_models.conversion import convert
from rlk_models.ops.fingerprint import FingerprintMismatch
from rlk_models.ops.selftest import SelfTestFailed, self_test
from rlk_models.testing.tiny import make_tiny_hf_checkpoint

from ..vllm.conftest import ROOT, run_json


@pytest.fixture(scope="module")
def fp32(tmp_path_factory):
    """A float32 checkpoint (plain torch GEMMs are visibly non-invariant in fp32 on CPU), its
    rlk conversion, and a planted copy whose config selects the planted backend."""
    import tests.planted_backend  # noqa: F401  (registers rlk_backend="planted")

    root = tmp_path_factory.mktemp("fp32")
    hf = make_tiny_hf_checkpoint(root / "hf", "qwen3", seed=5, dtype=torch.float32)
    good = convert(hf, root / "rlk", progress=False)
    planted = convert(hf, root / "planted", rlk_backend="planted", progress=False)
    return good, planted


def test_bisector_names_the_planted_layer_and_op(fp32):
    good, _ = fp32
    (out,) = run_json(["-m", "tests.vllm.worker", "bisect_planted", str(good)])
    assert out["records"] > 30
    assert out["clean"] is None and out["clean_logprobs_equal"], out
    assert out["planted_record"] == "model.layers.1.mlp.down_proj:out", out


def test_bisect_cli_reports_no_divergence_between_two_backends_runs(fp32):
    good, _ = fp32
    r = subprocess.run([sys.executable, "-m", "rlk_models.cli.bisect", f"train:{good}", f"train:{good}@reference",
                        "--tokens", "5,9,13,200,7"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "no divergence" in r.stdout, r.stdout + r.stderr


def _verify(ckpt):
    return subprocess.run([sys.executable, "-m", "rlk_models.cli.verify", str(ckpt), "--dtype", "float32",
                           "--configs", "batches_16_3_temp1", "--import", "tests.planted_backend"],
                          capture_output=True, text=True, cwd=ROOT, timeout=900,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


def test_rlk_verify_exit_codes(fp32):
    good, planted = fp32
    ok, bad = _verify(good), _verify(planted)
    assert ok.returncode == 0, ok.stdout + ok.stderr[-3000:]
    assert bad.returncode == 1, bad.stdout + bad.stderr[-3000:]
    row = [ln for ln in bad.stdout.splitlines() if ln.startswith("batches_16_3_temp1")][0]
    assert int(row.split()[1]) > 0  # mismatch_count column


def test_strict_mode_refuses_a_failing_self_test(monkeypatch, tmp_path):
    import tests.planted_backend  # noqa: F401

    monkeypatch.setenv("RLK_CACHE_DIR", str(tmp_path))
    cfg = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
               num_key_value_heads=1, head_dim=16, max_position_embeddings=64, rlk_strict=True)
    RLKQwen3ForCausalLM(RLKQwen3Config(**cfg))  # the reference backend passes on this machine
    with pytest.raises(SelfTestFailed, match=r"'planted'.*linear\[float32\]"):
        RLKQwen3ForCausalLM(RLKQwen3Config(**cfg, rlk_backend="planted"))
    RLKQwen3ForCausalLM(RLKQwen3Config(**{**cfg, "rlk_strict": False}, rlk_backend="planted"))  # not strict: runs
    cached = list(tmp_path.glob("selftest-*.json"))
    assert len(cached) == 2 and self_test("planted") == json.loads(
        [p for p in cached if "planted" in p.name][0].read_text())


def _edit_fingerprint(src, dst, **changes):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["rlk_fingerprint"].update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_fingerprint_mismatch_is_a_clear_error_in_both_classes(fp32, tmp_path):
    good, _ = fp32
    assert json.loads((good / "config.json").read_text())["rlk_fingerprint"]["vocab_tile"] > 0
    bad = _edit_fingerprint(good, tmp_path / "bad", vocab_tile=128)
    with pytest.raises(FingerprintMismatch, match="vocab_tile: checkpoint 128"):
        AutoModelForCausalLM.from_pretrained(bad, dtype=torch.float32)
    # another dtype only warns in the training class (fp32 master weights, accuracy studies) ...
    with pytest.warns(UserWarning, match="the training class computes in bfloat16; the checkpoint was converted "
                                         "for float32"):
        AutoModelForCausalLM.from_pretrained(good, dtype=torch.bfloat16)
    AutoModelForCausalLM.from_pretrained(bad, dtype=torch.float32, rlk_check_fingerprint=False)  # explicit opt-out
    (out,) = run_json(["-m", "tests.vllm.worker", "vllm_load", str(bad)])
    assert out["error"] and "vocab_tile" in out["error"] and "vLLM class" in out["error"], out
    # ... but the engine, which rollouts come from, refuses it
    (out,) = run_json(["-m", "tests.vllm.worker", "vllm_load", str(good)])  # engine in bfloat16
    assert out["error"] and "dtype: checkpoint 'float32' vs the vLLM class 'bfloat16'" in out["error"], out
