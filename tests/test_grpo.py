"""rlk-grpo, the main job: a few steps per family with zero mismatch at every step (CI's share of
the runs recorded in docs/grpo.md), the stock contrast measuring the mismatch of stock
transformers + stock vLLM on the same weights, and the task's pieces (split, answer parsing, the
cached pre-training)."""

import json
import subprocess
import sys

import pytest

from rlk_models.training import arith


def _run(tmp_path, *args):
    r = subprocess.run([sys.executable, "-m", "rlk_models.cli.grpo", "--out", str(tmp_path), "--sft-steps", "30",
                        "--eval-every", "2", "--eval-samples", "2", *args], capture_output=True, text=True, timeout=900)
    return r


def _rows(run_dir):
    return [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("family, extra", [("qwen3", []), ("llama", ["--kl-coef", "0.05", "--ppo-epochs", "2"])])
def test_grpo_steps_have_zero_mismatch(tmp_path, family, extra):
    r = _run(tmp_path, "--steps", "3", "--family", family, "--runs", "rlk", *extra)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    rows = _rows(tmp_path / "rlk")
    updates = [row for row in rows if "mismatch_count" in row]
    assert [row["step"] for row in updates] == [0, 1, 2]
    for row in updates:
        assert 0 < row["tokens"] <= 8 * 8 * 4  # prompts x group x max_new_tokens (rlk-grpo defaults)
        assert row["mismatch_count"] == 0 and row["max_abs_diff"] == 0.0, row
        assert row["ratio_min"] == 1.0 and row["ratio_max"] == 1.0 and row["kl_rollout_train"] == 0.0
        assert row["reward_mean"] in {k / 64 for k in range(65)}  # correctness: 0 or 1 per sample
    # held-out accuracy before the first update, every 2 steps, and after the last
    assert [row["step"] for row in rows if "heldout_acc" in row] == [0, 2, 3]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary) == {"rlk"} and summary["rlk"]["mismatch_count"] == 0 and summary["rlk"]["tokens"] > 0
    assert (tmp_path / "grpo.png").stat().st_size > 10_000


def test_stock_contrast_measures_mismatch_and_sft_is_cached(tmp_path):
    """Stock transformers vs stock vLLM on CPU disagree on (nearly) every token; if this ever
    reads 0 the comparison itself is broken, not fixed. The second run reuses the pre-training."""
    r = _run(tmp_path, "--steps", "2", "--runs", "stock")
    assert r.returncode == 0, r.stderr[-4000:]
    rows = [row for row in _rows(tmp_path / "stock") if "mismatch_count" in row]
    assert len(rows) == 2 and all(row["mismatch_count"] > 0 and row["max_abs_diff"] > 0 for row in rows)
    assert all(row["ratio_spread"] > 0 for row in rows)
    stamp = tmp_path / "checkpoints" / "qwen3-sft-hf" / "sft.json"
    first = stamp.stat().st_mtime_ns
    r = _run(tmp_path, "--steps", "1", "--runs", "stock")
    assert r.returncode == 0, r.stderr[-4000:]
    assert stamp.stat().st_mtime_ns == first  # cached, not retrained
    assert not (tmp_path / "checkpoints" / "qwen3-sft-hf.tmp").exists()


def test_task_split_and_answers():
    rl, held = arith.split()
    assert len(rl) + len(held) == arith.SIZE ** 2 and not set(rl) & set(held)
    assert arith.split() == (rl, held)  # fixed
    assert arith.correct(" 12", 5, 7) and arith.correct("12 + 1", 5, 7)
    assert not arith.correct(" 1", 5, 7) and not arith.correct(" 123", 5, 7) and not arith.correct("", 5, 7)
    assert arith.answer_of(" twelve") is None and arith.answer_of(" ²") is None  # a digit int() refuses


def test_cuda_graphs_needs_a_cuda_device(tmp_path, capsys):
    from rlk_models.cli.grpo import main

    with pytest.raises(SystemExit) as e:
        main(["--out", str(tmp_path), "--cuda-graphs"])
    assert e.value.code == 2 and "--cuda-graphs needs --device cuda" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before any work
