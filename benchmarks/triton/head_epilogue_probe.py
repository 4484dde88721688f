"""The head's statistics kernel before and after a change to its epilogue, in one device call: run this once
under each revision's package (PYTHONPATH) and the second time ``--against`` the first's JSON. Each run records,
at the Qwen3-8B and -1.7B heads (V = 151,936, its last vocab tile partial; K = 4096, 2048), for every kernel
form (the Triton kernel, the Gluon grid and ping-pong forms), probabilities kept or not:

- a digest of each output (per-tile max and sum, the target's logit, the kept probabilities): an integer sum of
  the output's bits weighted by position, which any changed bit changes (targets span the vocabulary, its last
  tile and -1, out of the shard);
- its time (median ms) and the cuBLAS lm_head matmul's; and the whole forward (``logprob_head_forward``) at
  #17's row counts, under a CUDA graph against the matmul's, and eagerly.

``--against`` prints, per point, whether every digest matches the other revision's and the time ratio.
``--stages PATH`` keeps the forward's stages (the tile stats, the shard's tree, lse, the target's logit, the
log-prob) at each row count in PATH on the first run and, on the second, names the first stage that differs
and its first differing rows (session 36 found a tree's rounding that way). The
contract's proof stays tests/gpu (the Gluon forms against the Triton kernel, the head's rows and gradients);
this adds that an epilogue change left the bits where they were.

    PYTHONPATH=OLD python benchmarks/triton/head_epilogue_probe.py           # $OUT/head_epilogue_probe.json
    PYTHONPATH=.   python benchmarks/triton/head_epilogue_probe.py --against OLD.json --name new
    python benchmarks/triton/head_epilogue_probe.py --plot OUT.png BEFORE.json,AFTER.json ...   # no GPU
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import bench, bench_graph, info, log, save  # noqa: E402
from head_sweep import stats_kernel_forms  # noqa: E402

V = 151936
ROWS = (256, 2048, 16384)
FORWARD_ROWS = (1, 16, 128, 1024, 8192)


def digest(x: torch.Tensor | None) -> int | None:
    """Sum of x's bits (as integers) times a position-dependent odd weight, wrapping in int64."""
    if x is None:
        return None
    bits = x.contiguous().view(-1).view({4: torch.int32, 2: torch.int16}[x.element_size()]).long()
    weights = torch.arange(bits.numel(), device=x.device, dtype=torch.int64) * 2654435761 + 1
    return int((bits * weights).sum())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", help="the other revision's JSON")
    ap.add_argument("--name", default="head_epilogue_probe")
    ap.add_argument("--stages", help="the forward's stages: written if absent, else compared")
    ap.add_argument("--plot", nargs="+", metavar=("PNG", "BEFORE,AFTER"),
                    help="the graphed forward against cuBLAS, before and after, per row count, from the runs' JSON")
    args = ap.parse_args()
    if args.plot:
        plot(args.plot[0], [tuple(pair.split(",")) for pair in args.plot[1:]])
        return
    head = importlib.import_module("rlk_models.ops.triton.logprob_head")
    head_sm90 = importlib.import_module("rlk_models.ops.triton.head_sm90")
    padded_vocab = importlib.import_module("rlk_models.ops.canonical").padded_vocab
    stages = {}
    log(info(), head.__file__)
    dev = torch.device("cuda")
    n_stats = triton.cdiv(V, head.VOCAB_TILE)
    res = {"info": info(), "module": head.__file__, "stats": {}, "forward": {}}
    for k in (4096, 2048):
        g = torch.Generator(device=dev).manual_seed(k)
        w = (torch.randn(V, k, device=dev, generator=g) * 0.02).bfloat16()
        for t in ROWS:
            h = torch.randn(t, k, device=dev, generator=g).bfloat16()
            tgt = torch.randint(-1, V, (t,), device=dev, generator=g)
            tgt[: t // 8] = torch.randint(V - 128, V, (t // 8,), device=dev, generator=g)  # the last, partial tile
            cublas = bench(lambda: F.linear(h, w), warmup=10, rep=50)
            for keep in (False, True):
                for kernel, config in stats_kernel_forms(head, head_sm90):
                    name = f"K={k} T={t} keep={keep} {kernel}{'' if config is None else ' ' + str(list(config))}"
                    out = head._launch_stats(h, w, tgt, False, False, n_stats, keep)
                    ms = bench(lambda: head._launch_stats(h, w, tgt, False, False, n_stats, keep), warmup=10, rep=50)
                    res["stats"][name] = {"digests": [digest(x) for x in (out[0], out[1], out[3], out[5])],
                                          "ms": ms, "cublas_ms": cublas, "x_cublas": ms / cublas}
                    del out
                    log(name, f"{res['stats'][name]['ms']:.3f} ms, {res['stats'][name]['x_cublas']:.3f}x cuBLAS")
            del h
        if k == 4096:  # the whole forward (the default kernels, the combine) at #17's rows, against the matmul
            for t in FORWARD_ROWS:
                h = torch.randn(t, k, device=dev, generator=g).bfloat16()
                tgt = torch.randint(0, V, (t,), device=dev, generator=g)
                lp = head.logprob_head_forward(h, w, tgt, V)
                # under a CUDA graph (as vLLM's decode steps run it: no host time) and eagerly (a training step)
                ms = bench_graph(lambda: head.logprob_head_forward(h, w, tgt, V))
                cublas = bench_graph(lambda: F.linear(h, w))
                eager = bench(lambda: head.logprob_head_forward(h, w, tgt, V), warmup=10, rep=50)
                res["forward"][f"T={t}"] = {"digest": digest(lp), "ms": ms, "cublas_ms": cublas,
                                            "x_cublas": ms / cublas, "eager_ms": eager}
                log(f"forward T={t}: {ms:.3f} ms graphed, {ms / cublas:.3f}x cuBLAS; eager {eager:.3f} ms")
                if args.stages:
                    tiles = head._launch_stats(h, w, tgt, False, False, n_stats, False)
                    shard = head.shard_stats(h, w, (0, padded_vocab(V)), V, tgt, with_entropy=False)
                    st = head.head_stats(h, w, V, tgt)
                    stages[t] = {"tile max": tiles[0], "tile sum": tiles[1], "tile target logit": tiles[3],
                                 "shard max": shard.m, "shard sum": shard.s, "lse": st.lse, "target logit": st.target,
                                 "log-prob": lp}
                    stages[t] = {n: x.cpu() for n, x in stages[t].items()}
        del w
    if args.against:
        other = json.loads(Path(args.against).read_text())
        same = all(other["stats"][n]["digests"] == r["digests"] for n, r in res["stats"].items()) and all(
            other["forward"][n]["digest"] == r["digest"] for n, r in res["forward"].items())
        res["against"] = {"module": other["module"], "all_bits_same": same}
        for kind in ("stats", "forward"):
            for n, r in res[kind].items():
                o = other[kind][n]
                bits = (o["digests"] == r["digests"]) if kind == "stats" else (o["digest"] == r["digest"])
                res["against"][f"{kind} {n}"] = {"bits_same": bits, "time_ratio": r["ms"] / o["ms"]}
                eager = f"; eager {r['eager_ms']:.3f} against {o['eager_ms']:.3f} ms" if kind == "forward" else ""
                log(f"{kind} {n}: {'same bits' if bits else 'BITS DIFFER'}, {r['ms']:.3f} against {o['ms']:.3f} ms"
                    f" ({r['ms'] / o['ms']:.3f}x; {r['x_cublas']:.3f}x cuBLAS, before {o['x_cublas']:.3f}x){eager}")
        log("ALL BITS SAME" if same else "SOME BITS DIFFER")
    if args.stages and Path(args.stages).exists():
        compare_stages(torch.load(args.stages), stages)
    elif args.stages:
        torch.save(stages, args.stages)
    save(args.name, res)


def plot(png: str, pairs: list[tuple[str, str]], goal: float = 1.10) -> None:
    """Grouped bars: the graphed forward's time over cuBLAS's at each row count, before and after, one pair of
    bars per call (its two runs in one device call), with #17's goal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(json.loads(Path(b).read_text())["forward"], json.loads(Path(a).read_text())["forward"]) for b, a in pairs]
    rows = list(runs[0][1])
    width = 0.8 / (2 * len(runs))
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, (before, after) in enumerate(runs):
        for j, (label, data, color) in enumerate((("before", before, "#bbbbbb"), ("after", after, "#3b75af"))):
            x = [r + (2 * i + j) * width - 0.4 + width / 2 for r in range(len(rows))]
            ax.bar(x, [data[t]["x_cublas"] for t in rows], width, color=color, label=label if i == 0 else None)
    ax.axhline(goal, color="#c0392b", linestyle="--", linewidth=1, label=f"goal {goal:.2f}x")
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xticks(range(len(rows)), [t.replace("T=", "") for t in rows])
    ax.set_xlabel("rows (tokens)")
    ax.set_ylabel("time / cuBLAS lm_head matmul")
    ax.set_ylim(0.9, max(1.25, ax.get_ylim()[1]))
    ax.set_title(f"Log-prob head forward, graphed, H200 ({len(runs)} calls; each bar pair one call)")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    log(f"wrote {png}")


def compare_stages(before: dict, after: dict) -> None:
    """Per row count, each stage's differing rows (bitwise), and for the first stage that differs its first
    three rows' values, before / after (up to four columns)."""
    for t, now in after.items():
        first = None
        for name, x in now.items():
            y = before[t][name]
            rows = (x.view(torch.int32) != y.view(torch.int32)).reshape(t, -1).any(1).nonzero().flatten()
            log(f"stages T={t} {name}: {len(rows)} rows differ")
            if len(rows) and first is None:
                first = name
                for r in rows[:3].tolist():
                    hexes = [f"{float(a):.9g}/{float(b):.9g}" for a, b in zip(y.reshape(t, -1)[r][:4],
                                                                         x.reshape(t, -1)[r][:4])]
                    log(f"  row {r} before/after: {hexes}")


if __name__ == "__main__":
    main()
