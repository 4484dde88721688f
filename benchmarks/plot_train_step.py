"""Where a training step's GPU time goes, per stack: the kernel profiles that ``train_step.py
--profile`` writes (``kernels.top``), summed by part, as one horizontal bar per run (PNG).

    python benchmarks/plot_train_step.py OUT.png LABEL=FILE.json:STACK [LABEL=FILE.json:STACK ...]

``STACK/forward`` plots that stack's forward-only pass instead (``forward_kernels``, recorded by
``train_step.py --profile`` since session 25).
"""

from __future__ import annotations

import json
import sys

PARTS = ["matmul", "attention", "log-prob head kernels", "RMSNorm", "SiLU-mul", "other"]


def part(kernel: str) -> str:
    n = kernel.lower()
    if "_mm_tma" in n or "nvjet" in n or "gemm" in n:
        return "matmul"
    if "sdpa" in n or "cudnn" in n or "flash" in n or n.startswith("_bwd_") or "_varlen_fwd" in n:
        return "attention"
    # ours compute the lm_head's logits inside (stats forward, dlogits backward); Liger's head GEMMs are cuBLAS
    if "head_stats" in n or "dlogits" in n or "_tree_kernel" in n or "cross_entropy" in n:
        return "log-prob head kernels"
    if "rms" in n or "fold_chunks" in n:
        return "RMSNorm"
    if "silu" in n or "swiglu" in n:
        return "SiLU-mul"
    return "other"


def by_part(run: dict) -> dict[str, float]:
    t = dict.fromkeys(PARTS, 0.0)
    for k in run["kernels"]["top"]:
        t[part(k["kernel"])] += k["ms"]
    t["other"] += run["kernels"]["total_ms"] - sum(t.values())  # kernels past the profile's top list
    return t


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out, specs = sys.argv[1], sys.argv[2:]
    runs, passes = {}, set()
    for spec in specs:
        label, rest = spec.split("=", 1)
        path, stack = rest.rsplit(":", 1)
        stack, _, which = stack.partition("/")
        run = json.load(open(path))[stack]
        passes.add("forward-only pass" if which == "forward" else "training step")
        if which == "forward":
            run = {"kernels": run["forward_kernels"], "tok_per_s": run["forward_tok_per_s"]}
        elif which:
            raise SystemExit(f"{spec}: /{which} is not a pass (only /forward)")
        else:
            run = {"kernels": run["kernels"], "tok_per_s": run["train_tok_per_s"]}
        runs[label] = run
    fig, ax = plt.subplots(figsize=(8, 3.8))
    labels, left = list(runs), [0.0] * len(runs)
    for p in PARTS:
        vals = [by_part(runs[lb])[p] for lb in labels]
        ax.barh(labels, vals, left=left, label=p)
        left = [a + b for a, b in zip(left, vals)]
    for i, lb in enumerate(labels):
        ax.text(left[i] + 3, i, f"{left[i]:.0f} ms, {runs[lb]['tok_per_s']:,} tok/s", va="center", fontsize=8)
        print(lb, {p: round(v, 1) for p, v in by_part(runs[lb]).items()})
    ax.set_xlim(0, max(left) * 1.3)
    ax.invert_yaxis()
    ax.set_xlabel(f"GPU kernel time of one {' or one '.join(sorted(passes, reverse=True))} (ms)")
    ax.legend(ncol=3, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    main()
