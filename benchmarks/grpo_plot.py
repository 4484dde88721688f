"""Compare an rlk GRPO run with its --baseline run: mismatch and reward per step, one PNG.

    python benchmarks/grpo_plot.py runs/grpo-qwen3 runs/grpo-qwen3-baseline docs/img/grpo_qwen3.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(run: str) -> list[dict]:
    return [json.loads(ln) for ln in (Path(run) / "metrics.jsonl").read_text().splitlines()]


def main(rlk: str, base: str, out: str) -> None:
    a, b = load(rlk), load(base)
    fig, (m, d, r) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    for rows, label, color in ((b, "stock transformers + stock vLLM", "tab:red"), (a, "rlk-models", "tab:green")):
        steps = [x["step"] for x in rows]
        m.plot(steps, [x["mismatch_count"] / x["tokens"] for x in rows], label=label, color=color)
        d.plot(steps, [x["max_abs_diff"] for x in rows], label=label, color=color)
        r.plot(steps, [x["reward_mean"] for x in rows], label=label, color=color)
    m.set_ylabel("mismatching tokens\n(fraction)")
    d.set_ylabel("max |logp_train -\nlogp_rollout|")
    r.set_ylabel("reward_mean")
    r.set_xlabel("GRPO step")
    m.set_title("trainer vs vLLM rollout log-probs, before each update")
    m.legend(loc="center right")
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    main(*sys.argv[1:4])
