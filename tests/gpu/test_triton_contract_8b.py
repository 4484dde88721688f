"""The Triton backend's bitwise contract at Qwen3-8B shapes (bf16) on a CUDA GPU: the checks the
H200 sweeps made before they became measurement-only (benchmarks/triton/*_sweep.py).

- matmul, every shape with its layer's K order (o, down: row-parallel K-groups): row 0 equal at
  every M (each M with its own launch), the M=8192 product equal to batches of 7, run to run,
  every candidate config in every form (grouped: fused, split-K per group or per half; plain: persistent or
  not, swap, flat) equal to the default at M=1 and M=1024, pointer kernel equal to TMA; backward run to run;
  at the Qwen3-1.7B layers (their own launch table) every M at the buckets' edges equal to the 4096-row product;
- log-prob head (V=151,936): the same row checks, ``full_logprobs`` at the target equals the head,
  backward run to run;
- RMSNorm (hidden rows, heads, plain 128-wide rows at shifted places in a program's tile), SiLU-mul, RoPE,
  embedding: the same row checks, backward run to run;
- attention (32/8 heads, D=128, 1..2047 tokens): every training config equal, a sequence alone
  equals it packed, paged prefill / token-by-token decode / mixed chunks at block sizes 16 and
  128 with every paged candidate config equal to training, backward run to run;
- the Gluon training forward (``attention_sm90``, the default on sm_90): output and log-sum-exp of every
  candidate equal to ``_varlen_fwd``'s at D 64 and 128, GQA and MHA; gradients through it equal, run to run;
- whole model (tiny Qwen3, tiny Llama, 2 layers of Qwen3-8B): ``PagedRunner`` log-probs equal the
  training class's at block sizes 16 and 128; gradients run to run;
- ``HeadGraphs`` (the vLLM class's graphed head at decode sizes, up to 256 rows): a replay equals the eager head.

Marked ``gpu``; skipped without CUDA. ``scripts/device_tests.sh`` runs them on the lent GPU.
"""

from __future__ import annotations

import importlib
import random

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SHAPES = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 24576), "down": (12288, 4096),
          "lm_head": (4096, 151936)}
ROW_PARALLEL = {"o", "down"}  # K split by tensor parallelism: canonical K-groups
M_INV = [1, 2, 3, 7, 16, 64, 192, 255, 320, 384, 448, 640, 768, 1024, 4096, 8192]  # 192-768: each launch bucket
BATCH7 = (0, 7, 1000, 4093, 8185)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def randn(*shape, g, scale=1.0):
    return (torch.randn(*shape, device="cuda", generator=g) * scale).bfloat16()


def bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bit patterns (fp32 as int32, bf16 as int16): ``torch.equal`` on them tells -0 from +0."""
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16)


def assert_rows(fn, x: torch.Tensor, *extra):
    """fn(x[:m])[0] equal for every m; fn(x) equal to batches of 7; run to run."""
    row0 = [fn(x[:m], *(e[:m] for e in extra))[0] for m in M_INV]
    assert all(torch.equal(row0[0], r) for r in row0), "row 0 differs across M"
    full = fn(x, *extra)
    for i in BATCH7:
        assert torch.equal(fn(x[i:i + 7], *(e[i:i + 7] for e in extra)), full[i:i + 7]), f"rows {i}.. in a batch of 7"
    assert torch.equal(fn(x, *extra), full), "run to run"
    return full


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_matmul_rows_and_launch_choices(name):
    import triton

    from rlk_models.ops.triton import linear
    from rlk_models.ops.triton.matmul import (
        CANDIDATE_CONFIGS,
        HALF,
        SM90_CANDIDATES,
        SM90_FALLBACKS,
        SM90_PLAIN_CANDIDATES,
        Launch,
        k_groups,
        matmul,
        mm,
    )

    k, n = SHAPES[name]
    rp = name in ROW_PARALLEL
    g = gen()
    x, w = randn(8192, k, g=g), randn(n, k, g=g, scale=0.02)
    assert_rows(lambda a: matmul(a, w, row_parallel=rp), x)
    flat = [dict(split=HALF, flat=True, persistent=False), dict(flat=True, persistent=False)]
    forms = ([dict(split=1), dict(split=HALF), dict(), *flat]
             if rp and k_groups(k) > 1
             else [dict(persistent=False), dict(), dict(swap=True), dict(flat=True, persistent=False)])
    for m in (1, 1024):
        ref = matmul(x[:m], w, row_parallel=rp)
        for c in CANDIDATE_CONFIGS:
            for f in forms:
                try:
                    got = matmul(x[:m], w, row_parallel=rp, launch=Launch(c, **f))
                except triton.runtime.errors.OutOfResources:
                    continue  # does not fit shared memory: never chosen
                assert torch.equal(got, ref), f"M={m} config {c} {f}"
    if rp and k_groups(k) > 1 and torch.cuda.get_device_capability() == (9, 0):
        # the Gluon fused form (matmul_sm90; the default above 256 rows) against the Triton form it replaced, with
        # and without bias, bf16 and fp32 out; and a TP=2 rank's product (its half of K in 4 groups, one run)
        bias = randn(n, g=g)
        half_x, half_w = x[:, :k // 2].contiguous(), w[:, :k // 2].contiguous()
        for m in (1, 200, 700, 1024, 8192):  # 700: Launch.tail's two launches (512 + 188 rows at N = 4096)
            runs = [(x[:m], w, b, dt, k_groups(k)) for b in (None, bias) for dt in (torch.bfloat16, torch.float32)]
            for a_, w_, b, dt, groups in runs + [(half_x[:m], half_w, None, torch.float32, HALF)]:
                ref = mm(a_, w_, b, dt, groups=groups, launch=SM90_FALLBACKS["groups", 128])
                for lc in SM90_CANDIDATES:
                    got = mm(a_, w_, b, dt, groups=groups, launch=lc)
                    assert torch.equal(got, ref), f"M={m} {lc} bias={b is not None} {dt} groups={groups}"
    if not rp and torch.cuda.get_device_capability() == (9, 0):
        # the same kernel in one K-group (candidates for the plain layers): against the Triton form, bias or not,
        # bf16 and fp32 out (where two K slots fit beside its staging tiles: 192 x 192 refuses fp32 out, and a
        # table's runs the fallback); 700 rows: at qkv's N a tail launch's 640 + 60
        bias = randn(n, g=g)
        for m in (1, 200, 700, 1024, 8192):
            for b, dt in ((None, torch.bfloat16), (bias, torch.bfloat16), (bias, torch.float32)):
                ref = mm(x[:m], w, b, dt, launch=SM90_FALLBACKS["plain", 128])
                for lc in SM90_PLAIN_CANDIDATES:
                    if dt == torch.float32 and lc.config[:2] == (192, 192):
                        with pytest.raises(ValueError, match="two K slots"):
                            mm(x[:m], w, b, dt, launch=lc)
                        continue
                    got = mm(x[:m], w, b, dt, launch=lc)
                    assert torch.equal(got, ref), f"M={m} {lc} bias={b is not None} {dt} plain"
                del ref, got
    assert torch.equal(matmul(x[:128], w, row_parallel=rp, tma=False), matmul(x[:128], w, row_parallel=rp)), \
        "pointer kernel != TMA"
    xg, wg = x[:4096].clone().requires_grad_(), w.clone().requires_grad_()
    dy = randn(4096, n, g=g)
    g1, g2 = (torch.autograd.grad(linear(xg, wg, row_parallel=rp), [xg, wg], dy) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(g1, g2)), "backward run to run"


SHAPES_1_7B = {"qkv": (2048, 4096), "o": (2048, 2048), "gate_up": (2048, 12288), "down": (6144, 2048)}
LAYERS = {**{s: v for s, v in SHAPES.items() if s != "lm_head"}, **{f"{s}_1.7b": v for s, v in SHAPES_1_7B.items()}}
# each edge of the layers' ``TUNED`` buckets (1.7B and 8B) and of the tables under them
M_EDGES = [1, 16, 17, 32, 33, 64, 65, 128, 129, 160, 161, 192, 193, 256, 257, 320, 321, 384, 385, 512, 513, 576, 577,
           640, 641, 700, 768, 769, 1024, 4096]


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_matmul_rows_at_the_table_edges(name):
    """Each layer's shape runs its own launches by M (``TUNED`` over the tables: Triton tiles, split-K, 128- and
    256-wide K loads, the Gluon forms; a launch file's, ``RLK_MATMUL_LAUNCHES``; the GPU's own packaged file's): the
    product of every M at each bucket's edges (and each file entry's) equals the first M rows of the 4096-row product
    (every row, not row 0 alone), and run to run; and, at the rows where the defaults load 128 or 256 wide, the
    64-wide pointer kernel's product."""
    from rlk_models.ops.triton.matmul import DEVICE_LAUNCHES, FILE_LAUNCHES, TUNED, k_groups, matmul

    k, n = LAYERS[name]
    rp = name.split("_")[0] in ROW_PARALLEL
    g = gen(1)
    x, w = randn(4096, k, g=g), randn(n, k, g=g, scale=0.02)
    full = matmul(x, w, row_parallel=rp)  # the first CUDA product: the GPU's own launch file is loaded
    kind = "groups" if rp and k_groups(k) > 1 else "plain"
    in_file = {m for table in (FILE_LAUNCHES, DEVICE_LAUNCHES) for lo, hi, _ in table.get((kind, n, k), ())
               for m in (lo - 1, lo, hi, hi + 1) if 0 < m <= 4096}  # a user's file's rows and the GPU's own file's
    in_tuned = {m for bound, _ in TUNED.get((kind, n, k), ()) for m in (bound, bound + 1)}  # its own buckets' edges
    for m in sorted(set(M_EDGES) | in_file | in_tuned):
        assert torch.equal(matmul(x[:m], w, row_parallel=rp), full[:m]), f"{name}: M={m} differs from M=4096"
    assert torch.equal(matmul(x[:700], w, row_parallel=rp), full[:700]), "run to run"
    for m in (1, 16, 32, 64, 128, 256):  # the wide loads' rows (Launch.block_k) against the kernel without TMA or them
        assert torch.equal(matmul(x[:m], w, row_parallel=rp, tma=False), full[:m]), f"{name}: M={m} pointer kernel"


@pytest.mark.parametrize("name", ["qkv", "gate_up", "qkv_1.7b", "gate_up_1.7b", "lm_head"])
def test_matmul_wide_gluon_tiles_give_the_plain_bits(name):
    """The Gluon form's 96- and 192-column tiles (``matmul_sm90.wide``: a consumer's columns as two boxes and fp32
    tiles, 64 + 32 or 128 + 64, two dots a K step; 128 and 192 rows; and 64 x 96 split by columns, 32 + 16 a
    consumer) in one K-group: at rows that fill, pad and split
    their tiles (qkv 1.7B's N = 4096 = 21 x 192 + 64 ends in a half-empty first box and an empty second one; 4096 = 42
    x 96 + 64 in one whole first box and an empty second), persistent and a program a tile, 64- and 128-wide K slots
    where two fit, with a bias and fp32 out (192 x 192 refuses fp32 out), equal bit for bit (the sign of a zero too:
    ``view``) to the 64-wide pointer kernel; and a row of -0 against positive weights (every product -0) gives +0 as
    every other form does (0 + the partial)."""
    from rlk_models.ops.triton import matmul_sm90
    from rlk_models.ops.triton.matmul import SM90_PLAIN_CANDIDATES, mm

    k, n = LAYERS.get(name) or SHAPES[name]
    g = gen(7)
    x, w, bias = randn(1024, k, g=g), randn(n, k, g=g, scale=0.02), randn(n, g=g)

    forms = [lc._replace(persistent=p, block_k=bk) for lc in SM90_PLAIN_CANDIDATES if matmul_sm90.wide(*lc.config[:2])
             for p in (True, False) for bk in matmul_sm90.SLOT_WIDTHS
             if matmul_sm90.ring_fits(*lc.config[:2], bk, lc.config[3], 2, 2)]
    assert {lc.config[:2] for lc in forms} == {(64, 96), (128, 96), (192, 96), (128, 192), (192, 192)}
    assert len(forms) == 18
    for m in (1, 127, 192, 200, 512, 700, 768, 1024):
        for b, dt in ((None, torch.bfloat16), (bias, torch.bfloat16), (bias, torch.float32)):
            ref = mm(x[:m], w, b, dt, tma=False)
            for lc in forms:
                if dt == torch.float32 and not matmul_sm90.ring_fits(*lc.config[:2], lc.block_k, lc.config[3], 2, 4):
                    continue  # refused (test_matmul_rows_and_launch_choices)
                got = mm(x[:m], w, b, dt, launch=lc)
                assert torch.equal(bits(got), bits(ref)), f"{name} M={m} {lc} bias={b is not None} {dt}"
    neg = x[:200].clone()
    neg[3] = -0.0
    ref = mm(neg, w.abs(), tma=False)
    for lc in forms:
        assert torch.equal(bits(mm(neg, w.abs(), launch=lc)), bits(ref)), f"{name} -0 row {lc}"
    assert bits(ref[3]).eq(0).all(), "the pointer kernel's sum of -0 products is +0"


@pytest.mark.parametrize("name", ["o", "down", "o_1.7b", "down_1.7b"])
def test_matmul_wide_gluon_tiles_in_k_groups_give_the_grouped_bits(name):
    """The Gluon form's 96-column tiles in K-groups (``matmul_sm90.GROUPED_WIDE``: 128 x 96, a consumer's columns as
    a 64- and a 32-wide box, and 64 x 96 split by columns, a consumer's as 32 + 16, each box with its own group
    partial, run and sum): the layer's 8 groups (two runs of 4) and a TP=2 and TP=4 rank's 4 and 2 (one run) over its
    share of K, at rows that fill, pad and split its tiles (N = 4096 = 42 x 96 + 64: 128 x 96's last tile one whole
    first box and an empty second, 64 x 96's second consumer half a first box; 2048 = 21 x 96 + 32: half a first
    box, and 64 x 96's second consumer nothing), persistent
    and a program a tile, 64- and 128-wide K slots, with a bias and fp32 out, equal bit for bit (the sign of a zero
    too) to the 64-wide pointer kernel in the same groups; and a row of -0 against positive weights gives +0."""
    from rlk_models.ops.triton import matmul_sm90
    from rlk_models.ops.triton.matmul import HALF, SM90_CANDIDATES, k_groups, mm

    k, n = LAYERS[name]
    g = gen(8)
    x, w, bias = randn(1024, k, g=g), randn(n, k, g=g, scale=0.02), randn(n, g=g)

    forms = [lc._replace(persistent=p, block_k=bk) for lc in SM90_CANDIDATES if matmul_sm90.wide(*lc.config[:2])
             for p in (True, False) for bk in matmul_sm90.SLOT_WIDTHS]
    assert {lc.config[:2] for lc in forms} == set(matmul_sm90.GROUPED_WIDE) and len(forms) == 8
    shares = [(k, k_groups(k)), (k // 2, HALF), (k // 4, HALF // 2)]  # the layer's K, a TP=2 and a TP=4 rank's
    for m in (1, 127, 200, 384, 700, 768, 1024):
        for kk, groups in shares:
            a, b_ = x[:m, :kk].contiguous(), w[:, :kk].contiguous()
            for b, dt in ((None, torch.bfloat16), (bias, torch.bfloat16), (bias, torch.float32)):
                ref = mm(a, b_, b, dt, groups=groups, tma=False)
                for lc in forms:
                    got = mm(a, b_, b, dt, groups=groups, launch=lc)
                    assert torch.equal(bits(got), bits(ref)), f"{name} M={m} K={kk} {lc} bias={b is not None} {dt}"
    neg = x[:200].clone()
    neg[3] = -0.0
    ref = mm(neg, w.abs(), groups=k_groups(k), tma=False)
    for lc in forms:
        assert torch.equal(bits(mm(neg, w.abs(), groups=k_groups(k), launch=lc)), bits(ref)), f"{name} -0 row {lc}"
    assert bits(ref[3]).eq(0).all(), "the pointer kernel's sum of -0 products is +0"


@pytest.mark.parametrize("load", [128, 256])
@pytest.mark.parametrize("name", ["qkv", "o", "gate_up", "down", "qkv_1.7b", "o_1.7b"])
def test_matmul_wide_k_loads_give_the_64_wide_bits(name, load):
    """``Launch.block_k`` of 128 or 256 (two or four of the contract's 64-wide K-tiles a pipeline step, one
    ``tl.dot``): every candidate config in every form that the search times it in (plain: persistent or not, swap,
    flat; grouped: split per group or per half, fused, flat), at 1, 64 and 1024 rows (256: at 1 and 64, the rows it is
    a candidate at), equal to the pointer kernel (64-wide dots, no ``block_k``: the defaults load 128 wide at some of
    these rows); with a bias and fp32 out too, and the backward's transposed layouts; 128: also the Gluon form's
    128-wide K slots. The claim is the GPU's (a dot is a chain of k16 MMAs into the accumulator; the interpreter's
    numpy dot is not), so only here."""
    import triton

    from rlk_models.ops.triton.matmul import (
        CANDIDATE_CONFIGS,
        HALF,
        SM90_CANDIDATES,
        SM90_PLAIN_CANDIDATES,
        Launch,
        k_groups,
        matmul,
        mm,
    )

    k, n = LAYERS[name]
    rp = name.split("_")[0] in ROW_PARALLEL
    grouped = rp and k_groups(k) > 1
    g = gen(6)
    x, w, bias = randn(1024, k, g=g), randn(n, k, g=g, scale=0.02), randn(n, g=g)
    forms = ([dict(split=1), dict(split=HALF), dict(), dict(split=HALF, flat=True, persistent=False),
              dict(flat=True, persistent=False)] if grouped
             else [dict(persistent=False), dict(), dict(swap=True), dict(flat=True, persistent=False)])
    for m in (1, 64, 1024) if load == 128 else (1, 64):
        ref = matmul(x[:m], w, row_parallel=rp, tma=False)  # 64-wide dots (the pointer kernel takes no block_k)
        for c in CANDIDATE_CONFIGS:
            for f in forms:
                if f.get("swap") and m > 256:
                    continue
                try:
                    got = matmul(x[:m], w, row_parallel=rp, launch=Launch(c, block_k=load, **f))
                except triton.runtime.errors.OutOfResources:
                    continue  # does not fit shared memory: never chosen
                assert torch.equal(got, ref), f"M={m} config {c} {f} block_k={load}"
    groups = k_groups(k) if rp else 1
    for m in (1, 64):  # bias, fp32 out: the defaults up to 64 rows with the wide loads
        for dt in (torch.bfloat16, torch.float32):
            ref = mm(x[:m], w, bias, dt, groups=groups, tma=False)
            lc = Launch((64, 32, 4, 4), swap=True) if not grouped else Launch((64, 128, 4, 4), split=1)
            assert torch.equal(mm(x[:m], w, bias, dt, groups=groups, launch=lc._replace(block_k=load)), ref), (m, dt)
    if not rp:  # the backward's layouts (dx = dy @ w: B as [K, N]; dw = dy^T @ x: A as [K, M])
        dy = randn(1024, n, g=g)
        for a, b, kw in ((dy, w, dict(b_kn=True)), (dy, x, dict(a_km=True, b_kn=True))):
            ref = mm(a, b, tma=False, **kw)
            got = mm(a, b, launch=Launch((128, 128, 4, 4), block_k=load), **kw)
            assert torch.equal(got, ref), f"backward layout {kw} block_k={load}"
    if load == 128 and torch.cuda.get_device_capability() == (9, 0):
        # the Gluon form (matmul_sm90) with 128-wide K slots, where two fit: every candidate at 200, 700 (a tail
        # launch's two) and 1024 rows, bf16 and, with bias, fp32 out; grouped also a TP=2 rank's half of K
        half_x, half_w = x[:, :k // 2].contiguous(), w[:, :k // 2].contiguous()
        for m in (200, 700, 1024):
            runs = [(x[:m], w, None, torch.bfloat16, groups), (x[:m], w, bias, torch.float32, groups)]
            if grouped:
                runs.append((half_x[:m], half_w, None, torch.bfloat16, HALF))
            for a_, w_, b, dt, gr in runs:
                ref = mm(a_, w_, b, dt, groups=gr, tma=False)
                for lc in SM90_CANDIDATES if grouped else SM90_PLAIN_CANDIDATES:
                    try:
                        got = mm(a_, w_, b, dt, groups=gr, launch=lc._replace(block_k=load))
                    except ValueError as exc:
                        assert "two K slots" in str(exc), exc  # the one refusal a 128-wide slot may meet here
                        continue
                    assert torch.equal(got, ref), f"M={m} {lc} block_k={load} bias={b is not None} {dt} groups={gr}"


def test_matmul_accumulate_at_the_head_backward_shape():
    """dh += dlogits @ w_chunk at the 8B head's backward shape (2048 rows, a 2048-wide vocab chunk,
    K = 4096, fp32 out): more tiles than SMs, so a persistent program accumulates several tiles
    (the CPU test's tiny shapes never do); equal to ``out + mm(...)`` in every launch form."""
    import triton

    from rlk_models.ops.triton.matmul import CANDIDATE_CONFIGS, Launch, mm

    g = gen(4)
    dl, w = randn(2048, 2048, g=g), randn(2048, 4096, g=g, scale=0.02)
    dh0 = torch.randn(2048, 4096, device="cuda", generator=g)
    want = dh0 + mm(dl, w, b_kn=True, out_dtype=torch.float32)
    got = dh0.clone()
    mm(dl, w, b_kn=True, out=got, accumulate=True)
    assert torch.equal(got, want), "default launch"
    for c in CANDIDATE_CONFIGS:
        for f in (dict(), dict(persistent=False), dict(flat=True, persistent=False)):
            got = dh0.clone()
            try:
                mm(dl, w, b_kn=True, out=got, accumulate=True, launch=Launch(c, **f))
            except triton.runtime.errors.OutOfResources:
                continue
            assert torch.equal(got, want), f"config {c} {f}"


def test_logprob_head_rows_full_logprobs_and_backward():
    head = importlib.import_module("rlk_models.ops.triton.logprob_head")
    kdim, vocab = 4096, 151936
    g = gen()
    h, w = randn(8192, kdim, g=g), randn(vocab, kdim, g=g, scale=0.02)
    tgt = torch.randint(0, vocab, (8192,), device="cuda", generator=g)
    full = assert_rows(lambda a, t: head.logprob_head_forward(a, w, t, vocab), h, tgt)
    fl = head.full_logprobs(h[:300], w, vocab)
    assert torch.equal(fl.gather(1, tgt[:300, None])[:, 0], full[:300]), "full_logprobs at the target != head"
    assert torch.equal(head.full_logprobs(h[17:18], w, vocab)[0], fl[17]), "full_logprobs row alone"
    del fl
    hg, wg = h[:2048].clone().requires_grad_(), w.clone().requires_grad_()
    gl = torch.randn(2048, device="cuda", generator=g)
    lp = head.logprob_head(hg, wg, tgt[:2048], vocab)[0]  # the training forward: it keeps the probabilities
    assert torch.equal(lp.detach(), full[:2048]), "keeping the probabilities moved a log-prob"
    g1, g2 = (torch.autograd.grad(head.logprob_head(hg, wg, tgt[:2048], vocab)[0], [hg, wg], gl) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(g1, g2)), "backward run to run"
    del lp


def _grad(fn, leaf: torch.Tensor, *args) -> torch.Tensor:
    leaf = leaf.clone().requires_grad_()
    out = fn(leaf, *args)
    return torch.autograd.grad(out, leaf, torch.randn(out.shape, device="cuda", generator=gen(3)).bfloat16())[0]


def _rowwise_case(name: str):
    """(fn, x, extra row-aligned inputs, a function giving one backward's gradient)."""
    from rlk_models.ops import rope_table
    from rlk_models.ops.triton import silu_mul
    from rlk_models.ops.triton.embedding import embedding
    from rlk_models.ops.triton.rms_norm import rms_norm
    from rlk_models.ops.triton.rope import rope

    g = gen(1)
    if name.startswith("rms_norm"):
        d = 4096 if name == "rms_norm" else 128
        w = randn(d, g=g)
        # rms_norm_128: plain rows of a head's width, several a program (_fwd_rows), so the batches of 7 put
        # rows at other places in the program's tile than the full call does (4093 % 8 = 5)
        x = randn(8192, 8, d, g=g) if name == "rms_norm_heads" else randn(8192, d, g=g)
        fn = lambda a: rms_norm(a, w, 1e-6)  # noqa: E731
        return fn, x, (), lambda: _grad(fn, x)
    if name == "silu_mul":
        x = randn(8192, 2 * 12288, g=g, scale=3)
        return silu_mul, x, (), lambda: _grad(silu_mul, x)
    if name == "qk_norm_rope":  # Qwen3-8B's q (32 heads) and k (8) norms + RoPE, one launch on the qkv rows
        from rlk_models.ops.triton.rms_norm import qk_norm_rope

        table = rope_table(128, 40960, {"rope_type": "default", "rope_theta": 1e6}).cuda()
        pos = torch.randint(0, 40960, (8192,), device="cuda", generator=g)
        x, wq, wk = randn(8192, 48 * 128, g=g, scale=3), randn(128, g=g), randn(128, g=g)

        def fn(a, p):
            yq, yk = qk_norm_rope(a[:, :4096].view(-1, 32, 128), a[:, 4096:5120].view(-1, 8, 128), wq, wk, 1e-6, p,
                                  table)
            return torch.cat([yq.flatten(1), yk.flatten(1)], 1)
        return fn, x, (pos,), lambda: _grad(fn, x, pos)
    if name == "rope":
        table = rope_table(128, 40960, {"rope_type": "default", "rope_theta": 1e6}).cuda()
        pos = torch.randint(0, 40960, (8192,), device="cuda", generator=g)
        x = randn(8192, 32, 128, g=g)
        fn = lambda a, p: rope(a, p, table)  # noqa: E731
        return fn, x, (pos,), lambda: _grad(fn, x, pos)
    w = randn(151936, 4096, g=g)
    ids = torch.randint(0, 151936, (8192,), device="cuda", generator=g)
    return (lambda i: embedding(i, w)), ids, (), lambda: _grad(lambda ww: embedding(ids, ww), w)


@pytest.mark.parametrize("name", ["rms_norm", "rms_norm_heads", "rms_norm_128", "qk_norm_rope", "silu_mul", "rope",
                                  "embedding"])
def test_rowwise_ops_rows_and_backward(name):
    fn, x, extra, grad = _rowwise_case(name)
    assert_rows(fn, x, *extra)
    assert torch.equal(grad(), grad()), "backward run to run"


HQ, HKV, D = 32, 8, 128
LENS = [1, 7, 64, 65, 300, 1000, 2047]


def test_attention_training_configs_paged_schedules_and_backward():
    from rlk_models.ops.triton import attention as attn
    from rlk_models.testing.paged_steps import paged_steps, random_block_table

    g = gen()
    t = sum(LENS)
    q, k, v = randn(t, HQ, D, g=g), randn(t, HKV, D, g=g), randn(t, HKV, D, g=g)
    cu = torch.tensor([0] + torch.tensor(LENS).cumsum(0).tolist(), device="cuda")
    scale = D ** -0.5
    ref = attn.varlen_attention(q, k, v, cu, scale)
    for c in attn.TRAIN_CANDIDATES:  # TMA loads (the default) and pointer loads
        assert torch.equal(attn.varlen_attention(q, k, v, cu, scale, config=c), ref), f"training config {c}"
        assert torch.equal(attn.varlen_attention(q, k, v, cu, scale, config=c, tma=False), ref), f"{c} pointer loads"
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
        alone = attn.varlen_attention(q[a:b], k[a:b], v[a:b], torch.tensor([0, b - a], device="cuda"), scale)
        assert torch.equal(alone, ref[a:b]), f"sequence {a}:{b} alone"
    rng, cpu_gen = random.Random(0), torch.Generator().manual_seed(0)
    schedules = {"prefill": lambda n: n, "decode": lambda n: 1,
                 "mixed": lambda n: rng.choice([1, 1, 3, 16, 64, 100, 257])}
    for bs in (16, 128):
        for cfg in attn.PAGED_CANDIDATES:
            for sched_name, chunker in schedules.items():
                bt, nb = random_block_table(LENS, bs, cpu_gen, spare=5, device="cuda")
                cache = torch.full((nb, HKV, bs, 2 * D), float("nan"), dtype=torch.bfloat16, device="cuda")
                out = torch.full_like(q, float("nan"))
                for idx, rows, seq_lens, qsl in paged_steps(cache, k, v, cu, LENS, bt, chunker):
                    out[idx] = attn.paged_attention(q[idx], cache, rows, seq_lens, qsl, scale, config=cfg)
                assert torch.equal(out, ref), f"paged block_size={bs} config {cfg} {sched_name}"
    sl = slice(0, sum(LENS[:6]))
    qg, kg, vg = (x[sl].clone().requires_grad_() for x in (q, k, v))
    do = torch.randn_like(qg)
    g1, g2 = (torch.autograd.grad(attn.varlen_attention(qg, kg, vg, cu[:7], scale), [qg, kg, vg], do)
              for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(g1, g2)), "backward run to run"
    g3 = torch.autograd.grad(attn.varlen_attention(qg, kg, vg, cu[:7], scale, tma=False), [qg, kg, vg], do)
    assert all(torch.equal(a, b) for a, b in zip(g1, g3)), "backward: TMA loads against pointer loads"


@pytest.mark.parametrize("hq,hkv,d,dtype", [(32, 8, 128, torch.bfloat16), (16, 8, 128, torch.bfloat16),
                                           (8, 8, 64, torch.float16), (16, 2, 64, torch.bfloat16)])
def test_attention_sm90_forward_is_the_triton_forward(hq, hkv, d, dtype, monkeypatch):
    """Every form of the Gluon forward (``attention_sm90``, the default on sm_90) gives ``_varlen_fwd``'s
    bits: the output and the saved log-sum-exp, at sequence lengths around the tiles (1..2047 tokens:
    one key tile, a partial last tile, many tiles, rows past the end); a sequence alone as packed;
    and the gradients through it as through ``_varlen_fwd``."""
    from rlk_models.ops.triton import attention as attn
    from rlk_models.ops.triton import attention_sm90

    if not attention_sm90.usable(torch.empty(1, 1, d, device="cuda", dtype=dtype), None, None):
        pytest.skip("not an sm_90 GPU")
    g = gen(3)
    t = sum(LENS)
    q, k, v = (randn(t, h, d, g=g).to(dtype) for h in (hq, hkv, hkv))
    cu = torch.tensor([0] + torch.tensor(LENS).cumsum(0).tolist(), device="cuda")
    o_ref, lse_ref = attn._forward(q, k, v, cu, d ** -0.5, None, True, "triton")[:2]
    for c in attention_sm90.SM90_CANDIDATES:
        monkeypatch.setattr(attention_sm90, "SM90_CONFIG", c)
        o, lse = attn._forward(q, k, v, cu, d ** -0.5, None, True, "sm90")[:2]
        assert torch.equal(o, o_ref), f"{c}: output differs from _varlen_fwd's"
        assert torch.equal(lse, lse_ref), f"{c}: log-sum-exp differs from _varlen_fwd's"
    monkeypatch.undo()
    assert torch.equal(attn.varlen_attention(q, k, v, cu, d ** -0.5), o_ref), "the default"
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
        alone = attn.varlen_attention(q[a:b], k[a:b], v[a:b], torch.tensor([0, b - a], device="cuda"), d ** -0.5,
                                      kernel="sm90")
        assert torch.equal(alone, o_ref[a:b]), f"sequence {a}:{b} alone"
    do = randn(t, hq, d, g=g).to(dtype)
    grads = {}
    for kernel in ("sm90", "triton", "triton again"):
        qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
        o = attn.varlen_attention(qg, kg, vg, cu, d ** -0.5, kernel=kernel.split()[0])
        grads[kernel] = torch.autograd.grad(o, [qg, kg, vg], do)
    for name, a, b in zip(("dq", "dk", "dv"), grads["triton again"], grads["triton"]):
        assert torch.equal(a, b), f"{name}: the backward differs run to run"
    for name, a, b in zip(("dq", "dk", "dv"), grads["sm90"], grads["triton"]):
        assert torch.equal(a, b), f"{name} through the Gluon forward differs"


@pytest.mark.parametrize("t,k,keep_probs", [(128, 4096, True), (1000, 4096, True), (4096, 2048, True),
                                             (1000, 4096, False), (300, 2048, False)])
def test_head_stats_sm90_is_the_triton_kernel(t, k, keep_probs, monkeypatch):
    """The Gluon statistics kernel (``head_sm90``; ``STATS_KERNEL`` "auto" picks its grid or ping-pong form by T
    and K: here the grid form, ping-pong at T = 4096) gives the Triton kernel's bits: per-tile max
    and sum, the target's logit, and the kept probabilities, at row counts past a 128-row block (T = 1000: a
    partial last block), a partial last vocab tile (V = 2000), K = 4096 and 2048, targets in and out of the
    shard (-1); every config, twice in a row. Then the head's log-probs and gradients (dh, dW; from the kept
    probabilities or recomputed) with the grid form and with "auto"'s choice as with the Triton kernel."""
    from rlk_models.ops.triton import head_sm90

    logprob_head = importlib.import_module("rlk_models.ops.triton.logprob_head")  # the package's is a function
    h = randn(t, k, g=gen(7))
    if not head_sm90.usable(h):
        pytest.skip("not an sm_90 GPU")
    v = 2000
    w = randn(v, k, g=gen(8), scale=0.05)
    tgt = torch.randint(-1, v, (t,), device="cuda", generator=gen(9))
    n_stats = -(-v // logprob_head.VOCAB_TILE)
    monkeypatch.setattr(logprob_head, "STATS_KERNEL", "triton")
    want = logprob_head._launch_stats(h, w, tgt, False, False, n_stats, keep_probs)
    monkeypatch.setattr(logprob_head, "STATS_KERNEL", "sm90")
    default = head_sm90.STATS_SM90_CONFIG
    for c in head_sm90.STATS_SM90_CANDIDATES:
        monkeypatch.setattr(head_sm90, "STATS_SM90_CONFIG", c)
        for _ in range(2):
            got = logprob_head._launch_stats(h, w, tgt, False, False, n_stats, keep_probs)
            for name, a, b in zip(("max", "sum", "entropy sum", "target logit", "logits", "probabilities"), got,
                                  want):
                assert (a is None) == (b is None) and (a is None or torch.equal(a, b)), f"{c}: {name} differs"
    monkeypatch.setattr(head_sm90, "STATS_SM90_CONFIG", default)  # the gradients through the default form
    targets = tgt.clamp(min=0)
    grads = {}
    for kernel in ("triton", "sm90", "auto"):
        monkeypatch.setattr(logprob_head, "STATS_KERNEL", kernel)
        hg, wg = h.clone().requires_grad_(), w.clone().requires_grad_()
        lp = logprob_head.logprob_head(hg, wg, targets, v, save_probs=keep_probs)[0]
        grads[kernel] = (lp, *torch.autograd.grad(lp.sum(), [hg, wg]))
    for kernel in ("sm90", "auto"):
        for name, a, b in zip(("log-probs", "dh", "dW"), grads[kernel], grads["triton"]):
            assert torch.equal(a, b), f"{name} through the Gluon statistics ({kernel}) differ"


QWEN3_8B_2_LAYERS = dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=2, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False,
                         rms_norm_eps=1e-6, initializer_range=0.02)


@pytest.mark.parametrize("case", ["tiny_qwen3", "tiny_llama", "qwen3_8b_shape_2_layers"])
def test_model_paged_runner_equals_training(case):
    from rlk_models.families import FAMILIES
    from rlk_models.testing.paged_runner import PagedRunner, training_logprobs

    family, kw = {"tiny_qwen3": ("qwen3", dict(FAMILIES["qwen3"].tiny, vocab_size=512)),
                  "tiny_llama": ("llama", dict(FAMILIES["llama"].tiny, vocab_size=512)),
                  "qwen3_8b_shape_2_layers": ("qwen3", QWEN3_8B_2_LAYERS)}[case]
    spec = FAMILIES[family]
    torch.manual_seed(0)
    cfg = spec.config_cls(**kw, rlk_backend="triton")
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = spec.training_cls(cfg)
    finally:
        torch.set_default_dtype(torch.float32)
    model.eval()
    g = torch.Generator().manual_seed(1)
    lens = [300, 2, 129, 64, 75] if "8b" in case else [200, 3, 75, 40, 129]
    seqs = [torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist() for n in lens]
    want = training_logprobs(model, seqs)
    for bs in (16, 128):
        prefill = [min(p, n - 2) for p, n in zip([250, 1, 100, 0, 17], lens)]
        got = PagedRunner(model, block_size=bs, seed=bs).logprobs(seqs, prefill_lens=prefill, token_budget=96,
                                                                  arrivals=[0, 1, 1, 3, 6])
        mism = sum(int((a != b).sum()) for a, b in zip(want, got))
        assert mism == 0, f"block size {bs}: {mism} of {sum(len(a) for a in want)} log-probs differ"
    ids = torch.tensor([t for s in seqs for t in s], device="cuda")
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), device="cuda")
    model.train()
    grads = []
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        model.packed_token_logprobs(ids, cu).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert all(torch.equal(grads[0][n], grads[1][n]) for n in grads[0]), "gradients run to run"


def test_self_test_passes_under_a_cuda_device_context():
    """Strict mode runs the self-test wherever the model is being built (transformers uses device
    contexts); its draws and the RoPE table stay on the CPU, the checks run on the GPU."""
    from rlk_models.ops.selftest import self_test

    with torch.device("cuda"):
        result = self_test("triton", use_cache=False)
    assert result["ok"], result["failed"]


def test_head_graphs_give_the_eager_heads_bits():
    """The vLLM class's graphed TP=1 head (steps of <= 256 rows, every size writing into one shared
    buffer): a replay equals the eager head bitwise for every row count, padding rows included
    (65 -> 128, 129 -> 192, 200 -> 256 rows), after an in-place weight update (what push_weights
    does), and after the weight tensor is replaced (the graphs are rebuilt); more rows than the
    graphs hold run eagerly."""
    from rlk_models.modeling.head_graphs import HEAD_GRAPH_ROWS, HeadGraphs
    from rlk_models.ops import get_backend

    ops, vocab, k = get_backend("triton"), 1000, 256
    gen = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(1024, k, device="cuda", generator=gen).to(torch.bfloat16)

    def head(x, out):
        return ops.full_logprobs(x, w, vocab, out=out)

    graphs = HeadGraphs()
    for update in ("none", "in place", "new tensor"):
        if update == "in place":
            w.mul_(0.5)
        elif update == "new tensor":
            w = torch.randn(1024, k, device="cuda", generator=gen).to(torch.bfloat16)
        for t in (1, 3, 8, 17, 64, 65, 129, 200, HEAD_GRAPH_ROWS, HEAD_GRAPH_ROWS + 1):
            h = torch.randn(t, k, device="cuda", generator=gen).to(torch.bfloat16)
            with torch.inference_mode(t % 2 == 1):  # vLLM's steps run under inference_mode
                got = graphs(head, h, w, vocab).clone()
            assert torch.equal(got, head(h, None)), (update, t)
    assert sorted(graphs.graphs) == [1, 2, 4, 8, 16, 32, 64, 128, 192, 256]  # every size, captured at the first call
    assert graphs.out.shape == (HEAD_GRAPH_ROWS, vocab)  # one buffer for them all


_FRESH_THREADS = """
import json, threading
import torch
from rlk_models.ops.triton import linear
from rlk_models.ops.triton.matmul import mm
from rlk_models.ops.triton.utils import tma_ok

g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(256, 512, device="cuda", generator=g).bfloat16().requires_grad_()
w = torch.randn(1024, 512, device="cuda", generator=g).bfloat16().requires_grad_()
dy = torch.randn(256, 1024, device="cuda", generator=g).bfloat16()
y = linear(x, w)
# autograd's device thread has done nothing yet: the first op of this backward is the TMA dx product
dx, dw = torch.autograd.grad(y, [x, w], dy)
out = {}
def plain_thread():  # a Python thread whose first CUDA work is a TMA product
    out["thread"] = mm(x.detach(), w.detach())
t = threading.Thread(target=plain_thread)
t.start()
t.join()
print(json.dumps({"tma": tma_ok(dy, w.detach(), x.detach()),
                  "dx": torch.equal(dx, mm(dy, w.detach(), b_kn=True)),
                  "thread": torch.equal(out["thread"], y.detach())}))
"""


def test_tma_products_on_threads_that_never_touched_cuda():
    """Triton fills TMA descriptors before its launcher binds the CUDA context: a fresh process's
    first backward (whose first op is our dx product) and a new thread's first product used to
    fail with "invalid device context"; ``bind_cuda_context`` binds it. A fresh process, so no
    earlier test has bound autograd's thread already."""
    from tests.vllm.conftest import run_json

    (r,) = run_json(["-c", _FRESH_THREADS], timeout=300)
    assert r == {"tma": True, "dx": True, "thread": True}, r


def test_a_step_size_compiles_no_new_matmul():
    """A step's token count must not select a compiled kernel (an engine's prefill and mixed steps
    bring nearly every M; each new kernel is a JIT stall mid-rollout): over 42 sizes M = 520..2037,
    column- and row-parallel, the kernels compiled number at most one per (launch, M % 16 == 0) --
    Triton's own specialization of an int argument -- not one per tile count."""
    from rlk_models.ops.triton.matmul import _mm_tma_kernel, k_groups, launch_for, matmul
    from rlk_models.ops.triton.matmul_sm90 import _mm_groups_ws

    g = gen(3)
    x = torch.randn(2048, 2048, device="cuda", generator=g).bfloat16()
    w_col = torch.randn(3072, 2048, device="cuda", generator=g).bfloat16()
    w_row = torch.randn(2048, 2048, device="cuda", generator=g).bfloat16()
    caches = [kernel.device_caches[torch.cuda.current_device()][0] for kernel in (_mm_tma_kernel, _mm_groups_ws)]
    before = sum(map(len, caches))
    sizes = range(520, 2048, 37)
    for m in sizes:
        matmul(x[:m], w_col)
        matmul(x[:m], w_row, row_parallel=True)
    allowed = {(launch_for(m, 3072, 1, 2048), m % 16 == 0) for m in sizes} | {
        (launch_for(m, 2048, k_groups(2048), 2048), m % 16 == 0) for m in sizes}
    compiled = sum(map(len, caches)) - before
    assert compiled <= len(allowed), (compiled, len(allowed))
