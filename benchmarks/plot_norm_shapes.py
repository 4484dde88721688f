"""The norm launches' bandwidth, run against run: the JSONs that ``triton/norm_shapes.py`` writes,
one group of bars per launch (TB/s = the bytes it must move / its time) and one bar per run, with
the run's plain copy as the line to reach (PNG).

    python benchmarks/plot_norm_shapes.py OUT.png LABEL=FILE.json [LABEL=FILE.json ...] [--shape 8b] [--only backward]
"""

from __future__ import annotations

import argparse
import json

COPY = "copy_2_hidden"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("runs", nargs="+", help="LABEL=FILE.json")
    ap.add_argument("--shape", default="8b")
    ap.add_argument("--only", default="", help="comma-separated: the launches whose name has one (and the copy)")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {}
    for spec in args.runs:
        label, path = spec.split("=", 1)
        rows = [r for r in json.load(open(path))["rows"] if r.get("shape") == args.shape and "tb_per_s" in r
                and (any(o in r["case"] for o in args.only.split(",")) or r["case"] == COPY)]
        if not rows:
            raise SystemExit(f"{path}: no rows of shape {args.shape}")
        runs[label] = {r["case"]: r["tb_per_s"] for r in rows}
    cases = [c for c in dict.fromkeys(c for r in runs.values() for c in r) if c != COPY]
    width = 0.8 / len(runs)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for i, (label, tb) in enumerate(runs.items()):
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(cases))]
        ax.bar(xs, [tb.get(c, 0.0) for c in cases], width, label=label)
    copies = [tb[COPY] for tb in runs.values() if COPY in tb]
    if copies:
        ax.axhline(max(copies), color="black", lw=0.8, ls="--", label=f"a plain copy ({max(copies):.2f} TB/s)")
    ax.set_xticks(range(len(cases)), cases, fontsize=7, rotation=25, ha="right")
    ax.set_ylabel("TB/s (bytes moved / time)")
    ax.set_title(f"norm launches at the {args.shape} shape", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    for label, tb in runs.items():
        print(label, {c: round(v, 2) for c, v in tb.items()})


if __name__ == "__main__":
    main()
