"""Why one launch's time moves between device calls. Session 55 (H100) timed down 8B at 257 rows on one Gluon launch at
70.2, 87.1, 82.0, 77.1 and 70.5 us in five calls, each call's own rounds within 1%, while cuBLAS stayed at
58.0-60.9 us. This benchmark times the same product in one process on fresh copies of its operands, each at
other addresses (``--allocs``; every earlier copy kept alive, a pad of a different size before each), each copy in
rounds against cuBLAS (``matmul_sweep.timed_pair``), with the GPU's SM clock, power, temperature and throttle reasons
read before and after each (``gpu_state``). Then the first copy is timed again, to show drift with time apart from
address.

How to read the result (``spreads``). Suppose the copies spread as widely as the calls did, while each copy's rounds
stay close. Then where the operands lie moves the time. Suppose instead every copy times alike. Then the cause lies
with the process (what ran before it) or with the machine, and the clocks say which.

Session 56 (H100, CALL=s55var and the same inline at other points): down 8B at 257 rows, 8 copies, ours 70.4-84.2 us
across copies (1.20x) with each copy's rounds within 2.6% and the first copy the same when timed again (77.3, 79.7);
cuBLAS 60.6-63.0 (1.04x). At 256 rows ours spread 1.02x across copies (51.7-52.6 us), at down 8B 192 rows 1.02x,
gate_up 8B 256 rows 1.02x, down 1.7B 257 rows 1.04x. So where the operands lie moves this one launch: 96 tiles of
128 x 128, the last 32 with one row of 128; the SM clock ran 1,545-1,980 MHz at 676-700 W (the power limit) in every
copy, fast or slow.

    python benchmarks/triton/matmul_variance.py --shape down --m 257 --allocs 8 --rounds 3   # $OUT/matmul_variance.json
    python benchmarks/triton/matmul_variance.py plot RUN.json [RUN.json ...] OUT.png   # each run's copies, a panel each
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from statistics import median

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import info, log, save  # noqa: E402
from matmul_sweep import ROW_PARALLEL, SHAPES, timed_pair  # noqa: E402

from rlk_models.ops.triton.matmul import k_groups, launch_for, matmul  # noqa: E402

STATE_FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu", "clocks_throttle_reasons.active")
PAD_STEP = 2 * 1024 * 1024 + 192 * 1024  # each copy's pad grows by this: past the allocator's 2 MiB rounding, and
# off any power-of-two stride of the HBM channels


def pad_bytes(i: int) -> int:
    """The pad allocated before copy ``i`` (copy 0: none, so it lies where a benchmark's first tensors lie)."""
    return i * PAD_STEP


def gpu_state() -> dict:
    """The GPU's SM and memory clocks (MHz), power (W), temperature (C) and active throttle reasons (a bit mask) now,
    from nvidia-smi; {} where nvidia-smi cannot say."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(STATE_FIELDS)}", "--format=csv,noheader,nounits",
                              "-i", str(torch.cuda.current_device())], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    values = [v.strip() for v in out.stdout.strip().split(",")]
    return dict(zip(STATE_FIELDS, values)) if out.returncode == 0 and len(values) == len(STATE_FIELDS) else {}


def spreads(rows: list[dict]) -> dict:
    """For each side (cuBLAS, ours): the widest spread of one copy's rounds (max / min of its runs) and the spread of
    the copies' medians (max / min) -- the first is the noise of a timing, the second what the copies' addresses add
    to it."""
    out = {}
    for side in ("cublas", "ours"):
        runs = [r[f"{side}_runs_ms"] for r in rows]
        meds = [median(x) for x in runs]
        out[side] = {"within_copy": max(max(x) / min(x) for x in runs), "across_copies": max(meds) / min(meds),
                     "fastest_ms": min(meds), "slowest_ms": max(meds)}
    return out


def plot(runs: list[str], png: str) -> None:
    """A panel a run (its JSON): each copy's timings of both sides as dots, their medians as bars, so a run whose copies
    spread apart while each copy's own dots stay together shows the operands' addresses moving the time."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = [json.loads(Path(r).read_text()) for r in runs]
    fig, axes = plt.subplots(1, len(data), figsize=(5 * len(data), 3.8), squeeze=False)
    for ax, res in zip(axes[0], data):
        for side, color, dx in (("cublas", "C7", -0.18), ("ours", "C0", 0.18)):
            for i, row in enumerate(res["rows"]):
                us = [t * 1e3 for t in row[f"{side}_runs_ms"]]
                ax.bar(i + dx, median(us), width=0.34, color=color, alpha=0.35, label=side if i == 0 else None)
                ax.plot([i + dx] * len(us), us, ".", color=color, ms=5)
        ax.set_xticks(range(len(res["rows"])), [r["copy"].replace("copy ", "") for r in res["rows"]], fontsize=7)
        ax.set_xlabel("copy of the operands (other addresses; the last is copy 0 again)")
        ax.set_ylabel("us a product (CUDA graph)")
        ax.set_title(f"{res['shape']} M={res['m']} ({res['info'].get('gpu', '')})", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> None:
    if sys.argv[1:2] == ["plot"]:  # RUN.json [RUN.json ...] OUT.png
        if len(sys.argv) < 4:
            sys.exit("usage: matmul_variance.py plot RUN.json [RUN.json ...] OUT.png")
        return plot(sys.argv[2:-1], sys.argv[-1])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="down", choices=sorted(SHAPES))
    ap.add_argument("--m", type=int, default=257)
    ap.add_argument("--allocs", type=int, default=8, help="fresh copies of the operands, each at other addresses")
    ap.add_argument("--rounds", type=int, default=3, help="timings of each side a copy, round-robin")
    args = ap.parse_args()
    if args.allocs < 1 or args.rounds < 1 or args.m < 1:
        ap.error("--allocs, --rounds and --m must be at least 1")

    k, n = SHAPES[args.shape]
    rp = args.shape in ROW_PARALLEL
    g = torch.Generator(device="cuda").manual_seed(0)
    x0 = torch.randn(args.m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    w0 = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02)
    want = matmul(x0, w0, row_parallel=rp)  # first: the GPU's own launch file is loaded, so launch_for names its launch
    res = {"info": info(), "shape": args.shape, "k": k, "n": n, "m": args.m, "row_parallel": rp,
           "launch": str(launch_for(args.m, n, k_groups(k) if rp else 1, k)), "rows": []}
    kept = []  # every copy (and pad) alive to the end, so each new copy lands at new addresses

    def time_copy(label: str, x: torch.Tensor, w: torch.Tensor) -> None:
        if not torch.equal(matmul(x, w, row_parallel=rp), want):
            raise AssertionError(f"{label}: the copy's product differs from the first copy's")
        before = gpu_state()
        row = timed_pair(lambda: F.linear(x, w), lambda: matmul(x, w, row_parallel=rp), args.rounds)
        row |= {"copy": label, "x_ptr": x.data_ptr(), "w_ptr": w.data_ptr(), "state_before": before,
                "state_after": gpu_state()}
        res["rows"].append(row)
        log(f"{args.shape} M={args.m} {label:>8}: cuBLAS {row['cublas_ms'] * 1e3:7.1f} us  ours "
            f"{row['ours_ms'] * 1e3:7.1f} us ({row['ratio']:.2f}x; runs "
            f"{min(row['ours_runs_ms']) * 1e3:.1f}-{max(row['ours_runs_ms']) * 1e3:.1f} us)  x at {x.data_ptr():#x}, "
            f"w at {w.data_ptr():#x}  SM {before.get('clocks.sm', '?')}->{row['state_after'].get('clocks.sm', '?')} "
            f"MHz, {row['state_after'].get('power.draw', '?')} W")
        save("matmul_variance", res)

    first = None
    for i in range(args.allocs):
        pad = torch.empty(pad_bytes(i), dtype=torch.uint8, device="cuda") if i else None
        x, w = x0.clone(), w0.clone()
        kept += [pad, x, w]
        first = first or (x, w)
        time_copy(f"copy {i}", x, w)
    time_copy("copy 0 again", *first)
    res["spreads"] = spreads(res["rows"])
    save("matmul_variance", res)
    for side, s in res["spreads"].items():
        log(f"{side}: within a copy up to {s['within_copy']:.3f}x, across copies {s['across_copies']:.3f}x "
            f"({s['fastest_ms'] * 1e3:.1f}-{s['slowest_ms'] * 1e3:.1f} us)")


if __name__ == "__main__":
    main()
