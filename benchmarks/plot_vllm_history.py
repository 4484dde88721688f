"""rlk's throughput in CUDA vLLM against stock vLLM's, session by session, from the recorded runs of
``vllm_cuda.py`` (``docs/data/vllm_cuda_*.json``): one point a call (rlk's median run over stock's, both from the
same call), and a bar from rlk's slowest run over stock's fastest to rlk's fastest over stock's slowest -- how far
one call's runs let the ratio move (PNG).

    python benchmarks/plot_vllm_history.py OUT.png [DATA_DIR]   # default DATA_DIR: docs/data

Only calls that list every timed run (``throughput.runs_tok_per_s``, since session 14) of both engines are drawn,
TP=1, not under ``--profile`` (the engine core in the benchmark's process), one series a workload: 256 prompts x
512 tokens, or the RL-shaped rollout (``--varied``); on an H200 unless the file says another GPU (``-h100`` in its
name: a series of its own), with text out unless it records token ids (``"detokenize": false``: its own series).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path


def history(data: Path) -> dict[str, list[dict]]:
    """Series name -> [{session, file, ratio, low, high, mismatches}], by session, from ``data``'s vLLM JSONs."""
    out: dict[str, list[dict]] = {}
    for f in sorted(data.glob("vllm_cuda_*.json")):
        session = re.search(r"-s(\d+)", f.name)
        d = json.loads(f.read_text())
        if not (session and isinstance(d, dict) and d.get("tp", 1) == 1):
            continue
        engines = [d.get(e) or {} for e in ("rlk", "stock")]
        runs = [e.get("throughput", {}).get("runs_tok_per_s") for e in engines]
        # ``--profile`` runs the engine core in the benchmark's own process (the profiler's view), a host setup
        # users do not run; ``--engine-profile`` traces after the timed runs, in the default setup: kept
        if not all(runs) or any("profile" in e or "prefill_profile" in e for e in engines):
            continue
        rlk, stock = runs
        name = f"{d['shape']}, " + ("RL-shaped rollout" if d.get("varied") else f"{d['n']} x {d['max_tokens']}")
        if d.get("detokenize") is False:  # token ids out (session 49 on): a series of its own
            name += ", token ids"
        if "-h100" in f.name:  # a call the H100 ran: not in the H200 series
            name += ", H100"
        out.setdefault(name, []).append({
            "session": int(session.group(1)), "file": f.name,
            "ratio": statistics.median(rlk) / statistics.median(stock),
            "low": min(rlk) / max(stock), "high": max(rlk) / min(stock),
            "mismatches": (d.get("rlk_parity") or {}).get("mismatch_count")})
    for points in out.values():
        points.sort(key=lambda p: (p["session"], p["file"]))
    return out


def plot(series: dict[str, list[dict]], png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, (name, points) in enumerate(sorted(series.items())):
        xs = [p["session"] + (i - 1.5) * 0.12 for p in points]  # side by side where two series share a session
        ys = [p["ratio"] for p in points]
        err = [[y - p["low"] for y, p in zip(ys, points)], [p["high"] - y for y, p in zip(ys, points)]]
        ax.errorbar(xs, ys, yerr=err, fmt="o", color=f"C{i}", capsize=2, lw=0.8, ms=4, label=name)
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("session")
    ax.set_ylabel("rlk / stock vLLM throughput (H200 unless named)")
    ax.set_title("median run over median run; bars: slowest over fastest to fastest over slowest", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> None:
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: plot_vllm_history.py OUT.png [DATA_DIR]")
    data = Path(sys.argv[2]) if len(sys.argv) == 3 else Path(__file__).resolve().parents[1] / "docs" / "data"
    series = history(data)
    if not series:
        sys.exit(f"plot_vllm_history.py: no vLLM runs with both engines' timed runs in {data}")
    for name, points in sorted(series.items()):
        print(name + ": " + ", ".join(f"s{p['session']} {p['ratio']:.3f} ({p['low']:.2f}-{p['high']:.2f})"
                                      for p in points))
    plot(series, sys.argv[1])


if __name__ == "__main__":
    main()
