"""Where an op's host time goes: the JSONs that ``triton/host_time.py --breakdown`` writes, one group of bars per
op and one stacked bar per run (Triton's binder, cache key, globals check and launcher, and the rest: the op's own
Python, torch's allocations and autograd), with torch's own op's host time as a marker (PNG).

    python benchmarks/plot_host_time.py OUT.png LABEL=FILE.json [LABEL=FILE.json ...]
"""

from __future__ import annotations

import argparse
import json

STACK = [("ours and torch_us", "ours: the op's Python, allocations, autograd"), ("triton binder_us", "Triton: binder"),
         ("triton cache key_us", "Triton: cache key"), ("triton globals check_us", "Triton: globals check"),
         ("triton launcher_us", "Triton: launcher (TMA descriptors encoded)")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("runs", nargs="+", help="LABEL=FILE.json")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {}
    for spec in args.runs:
        label, path = spec.split("=", 1)
        with open(path) as f:
            runs[label] = json.load(f)
    ops = [name for name, v in next(iter(runs.values()))["ops"].items() if "breakdown" in v]
    width = 0.8 / len(runs)
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(ops)), 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for r, (label, res) in enumerate(runs.items()):
        xs = [i + (r - (len(runs) - 1) / 2) * width for i in range(len(ops))]
        bottom = [0.0] * len(ops)
        for s, (key, name) in enumerate(STACK):
            vals = [res["ops"][op]["breakdown"][key] for op in ops]
            ax.bar(xs, vals, width * 0.9, bottom=bottom, color=colors[s], label=name if r == 0 else None,
                   edgecolor="black", linewidth=0.3)
            bottom = [b + v for b, v in zip(bottom, vals)]
        for x in xs:
            ax.text(x, 0, label, rotation=90, ha="center", va="bottom", fontsize=7, color="white")
        ax.scatter(xs, [res["ops"][op]["torch_us"] for op in ops], marker="_", s=300, color="black",
                   label="torch's op, all its host time" if r == 0 else None, zorder=3)
    ax.set_xticks(range(len(ops)), ops, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("host microseconds per call")
    info = next(iter(runs.values()))["info"]
    ax.set_title(f"Host time to queue one op, by stage ({info['gpu']}, torch {info['torch']}, triton "
                 f"{info['triton']})", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
