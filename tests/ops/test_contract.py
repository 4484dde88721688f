"""Bitwise contract of every op (torch.equal only), for every backend that can show it on this
machine (``tests.conftest.CONTRACT_BACKENDS``: the reference everywhere, Triton natively on
CUDA; under the interpreter Triton's bitwise checks are tests/ops/triton/test_kernels.py): a row
computed alone equals the same row inside batches of other rows, at any position, with 1 or 2
threads, on every run; backward twice gives bitwise-equal gradients. The context form
``attend`` (prefill == chunked == decode) is the reference's; Triton's paged kernel is checked
against its training kernel in test_kernels.py."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlk_models.ops import get_backend, rope_table
from tests.conftest import CONTRACT_BACKENDS, backend_device

DTYPES = [torch.float32, torch.bfloat16]
WEIRD = [1, 5, 17, 64, 123]
SETTINGS = settings(max_examples=15, deadline=None)
on_backends = pytest.mark.parametrize("backend", CONTRACT_BACKENDS)
ops = get_backend("reference")  # the reference-only tests below (attend)
DEV = "cpu"


def use(backend: str) -> None:
    """Point this module's ``ops`` and ``rand`` at ``backend`` and its device."""
    global ops, DEV
    ops, DEV = get_backend(backend), backend_device(backend)


def rand(*shape, dtype=torch.float32, seed=0, scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype).to(DEV)


def embed_row(row, others, pos):
    """Batch = others with ``row`` inserted at index ``pos``."""
    return torch.cat([others[:pos], row[None], others[pos:]])


def assert_row_invariant(fn, rows, others_n, pos, seed, dtype):
    """fn(rows)[i] == fn(batch with rows[i] at pos)[pos] for every i, and across threads."""
    full = fn(rows)
    others = rand(others_n, *rows.shape[1:], dtype=dtype, seed=seed + 1)
    for i in range(rows.shape[0]):
        batch = embed_row(rows[i], others, min(pos, others_n))
        assert torch.equal(fn(batch)[min(pos, others_n)], full[i]), f"row {i}"
    torch.set_num_threads(1)
    single = fn(rows)
    torch.set_num_threads(2)
    assert torch.equal(single, full) and torch.equal(fn(rows), full)


@on_backends
@SETTINGS
@given(m=st.integers(1, 9), k=st.sampled_from(WEIRD + [256]), n=st.sampled_from(WEIRD), others=st.integers(0, 40),
       pos=st.integers(0, 40), bias=st.booleans(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 999),
       row_parallel=st.booleans())
def test_linear_rows(backend, m, k, n, others, pos, bias, dtype, seed, row_parallel):
    use(backend)
    w, b = rand(n, k, dtype=dtype, seed=seed + 2), (rand(n, dtype=dtype, seed=seed + 3) if bias else None)
    assert_row_invariant(lambda x: ops.linear(x, w, b, row_parallel=row_parallel), rand(m, k, dtype=dtype, seed=seed),
                         others, pos, seed, dtype)


@on_backends
@SETTINGS
@given(m=st.integers(1, 9), d=st.sampled_from(WEIRD + [32]), others=st.integers(0, 40), pos=st.integers(0, 40),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 999))
def test_rms_norm_rows(backend, m, d, others, pos, dtype, seed):
    use(backend)
    w = rand(d, dtype=dtype, seed=seed + 2)

    def norm(x):
        return ops.rms_norm(x, w, 1e-6)

    assert_row_invariant(norm, rand(m, d, dtype=dtype, seed=seed), others, pos, seed, dtype)
    # per-head form [T, H, D]
    assert_row_invariant(norm, rand(m, 3, d, dtype=dtype, seed=seed), others, pos, seed, dtype)


@on_backends
@SETTINGS
@given(m=st.integers(1, 9), i=st.sampled_from(WEIRD + [128]), others=st.integers(0, 40), pos=st.integers(0, 40),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 999))
def test_silu_mul_rows(backend, m, i, others, pos, dtype, seed):
    use(backend)
    assert_row_invariant(ops.silu_mul, rand(m, 2 * i, dtype=dtype, seed=seed, scale=4), others, pos, seed, dtype)


@on_backends
@SETTINGS
@given(m=st.integers(1, 9), others=st.integers(0, 40), pos=st.integers(0, 40), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 999))
def test_rope_rows(backend, m, others, pos, dtype, seed):
    use(backend)
    table = rope_table(32, 128, {"rope_type": "default", "rope_theta": 10000.0}).to(DEV)
    g = torch.Generator().manual_seed(seed)
    x, positions = rand(m, 3, 32, dtype=dtype, seed=seed), torch.randint(0, 128, (m,), generator=g).to(DEV)
    full = ops.rope(x, positions, table)
    ox, opos = rand(others, 3, 32, dtype=dtype, seed=seed + 1), torch.randint(0, 128, (others,), generator=g).to(DEV)
    p = min(pos, others)
    for r in range(m):
        out = ops.rope(embed_row(x[r], ox, p), embed_row(positions[r], opos, p), table)
        assert torch.equal(out[p], full[r])


@on_backends
@SETTINGS
@given(m=st.integers(1, 9), vocab=st.sampled_from([7, 256, 300, 700, 1025]), others=st.integers(0, 30),
       pos=st.integers(0, 30), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 999))
def test_logprob_head_rows_and_full_logprobs(backend, m, vocab, others, pos, dtype, seed):
    use(backend)
    w = rand(vocab + 3, 48, dtype=dtype, seed=seed + 2)  # +3 rows: vLLM-style vocab padding, ignored
    g = torch.Generator().manual_seed(seed)
    h, tgt = rand(m, 48, dtype=dtype, seed=seed), torch.randint(0, vocab, (m,), generator=g).to(DEV)
    lp, ent = ops.logprob_head(h, w, tgt, vocab, True)
    oh, otg = rand(others, 48, dtype=dtype, seed=seed + 1), torch.randint(0, vocab, (others,), generator=g).to(DEV)
    p = min(pos, others)
    for r in range(m):
        lp2, ent2 = ops.logprob_head(embed_row(h[r], oh, p), w, embed_row(tgt[r], otg, p), vocab, True)
        assert torch.equal(lp2[p], lp[r]) and torch.equal(ent2[p], ent[r])
    full = ops.full_logprobs(h, w, vocab)
    assert full.shape == (m, vocab)
    assert torch.equal(full.gather(1, tgt[:, None])[:, 0], lp)  # the vLLM side's numbers are the head's
    out = torch.full((m, vocab), float("nan"), device=DEV)  # into a caller's buffer (vLLM's head graphs): the same
    assert ops.full_logprobs(h, w, vocab, out=out) is out and torch.equal(out, full)


@on_backends
def test_full_logprobs_refuses_a_wrong_out_buffer(backend):
    use(backend)
    h, w = rand(3, 48, seed=1), rand(300, 48, seed=2)
    for bad, what in ((torch.empty(3, 299, device=DEV), r"shape \[3, 300\]"),
                      (torch.empty(3, 300, dtype=torch.bfloat16, device=DEV), "float32"),
                      (torch.empty(300, 3, device=DEV).T, "not contiguous")):
        with pytest.raises(ValueError, match=what):
            ops.full_logprobs(h, w, 300, out=bad)


def _packed(lengths, hq, hkv, d, dtype, seed):
    t = sum(lengths)
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), device=DEV)
    return (rand(t, hq, d, dtype=dtype, seed=seed), rand(t, hkv, d, dtype=dtype, seed=seed + 1),
            rand(t, hkv, d, dtype=dtype, seed=seed + 2), cu)


@on_backends
@SETTINGS
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=5), which=st.integers(0, 4),
       gqa=st.sampled_from([(4, 4), (4, 2), (4, 1)]), d=st.sampled_from([16, 32]), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 999))
def test_attention_sequence_alone_equals_in_batch(backend, lengths, which, gqa, d, dtype, seed):
    use(backend)
    which %= len(lengths)
    q, k, v, cu = _packed(lengths, *gqa, d, dtype, seed)
    out = ops.varlen_attention(q, k, v, cu, d ** -0.5)
    a, b = int(cu[which]), int(cu[which + 1])
    alone = ops.varlen_attention(q[a:b], k[a:b], v[a:b], torch.tensor([0, b - a], device=DEV), d ** -0.5)
    assert torch.equal(alone, out[a:b])


@SETTINGS
@given(n=st.integers(1, 60), chunk=st.integers(1, 17), gqa=st.sampled_from([(4, 2), (2, 1)]),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 999))
def test_attention_prefill_chunked_prefill_and_decode_agree(n, chunk, gqa, dtype, seed):
    """Full-sequence pass == chunks of queries over the keys so far == token-by-token decode."""
    use("reference")
    q, k, v, cu = _packed([n], *gqa, 32, dtype, seed)
    full = ops.varlen_attention(q, k, v, cu, 32 ** -0.5)
    pos = torch.arange(n)
    for a in range(0, n, chunk):  # chunked prefill: the cache holds keys 0..b-1
        b = min(a + chunk, n)
        assert torch.equal(ops.attend(q[a:b], k[:b], v[:b], pos[a:b], 32 ** -0.5), full[a:b])
    for t in range(n):  # decode: one query against exactly its context
        assert torch.equal(ops.attend(q[t:t + 1], k[:t + 1], v[:t + 1], pos[t:t + 1], 32 ** -0.5), full[t:t + 1])
    # a cache longer than the context (later tokens present but not visible) changes nothing
    assert torch.equal(ops.attend(q, torch.cat([k, k]), torch.cat([v, v]), pos, 32 ** -0.5), full)


@on_backends
@SETTINGS
@given(m=st.integers(0, 9), d=st.sampled_from(WEIRD + [32]), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 999),
       stream_grad=st.booleans())
def test_add_rms_norm_is_the_add_then_the_norm(backend, m, d, dtype, seed, stream_grad):
    """The fused residual add + norm returns exactly (rms_norm(x + r), x + r), and its gradients
    are the two ops' (the stream's gradient and the norm's meet in one addition either way)."""
    use(backend)
    w = rand(d, dtype=dtype, seed=seed + 2)
    x, r = rand(m, d, dtype=dtype, seed=seed), rand(m, d, dtype=dtype, seed=seed + 1, scale=4)
    gy, gs = rand(m, d, seed=seed + 3), rand(m, d, seed=seed + 4)

    def run(fused):
        xl, rl, wl = (t.detach().clone().requires_grad_() for t in (x, r, w))
        y, s = ops.add_rms_norm(xl, rl, wl, 1e-6) if fused else (ops.rms_norm(xl + rl, wl, 1e-6), xl + rl)
        loss = (y.float() * gy).sum() + ((s.float() * gs).sum() if stream_grad else 0)
        loss.backward()
        return y, s, xl.grad, rl.grad, wl.grad

    for a, b in zip(run(True), run(False), strict=True):
        assert torch.equal(a, b)


@on_backends
@SETTINGS
@given(m=st.integers(0, 9), i=st.sampled_from([8, 24, 256]), n=st.sampled_from(WEIRD), bias=st.booleans(),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 999), which=st.sampled_from(["all", "gate_up", "weight"]))
def test_silu_mul_linear_is_silu_mul_then_the_down_projection(backend, m, i, n, bias, dtype, seed, which):
    """The MLP's fused SiLU-mul + down projection returns exactly linear(silu_mul(gate_up), w, b,
    row_parallel=True) and the two ops' gradients (whichever inputs want one), whether it keeps the
    product for the backward or rebuilds it there -- and rebuilding, it keeps only gate_up and the
    parameters."""
    use(backend)
    gu, w = rand(m, 2 * i, dtype=dtype, seed=seed, scale=3), rand(n, i, dtype=dtype, seed=seed + 1, scale=0.2)
    b = rand(n, dtype=dtype, seed=seed + 2) if bias else None
    dy = rand(m, n, dtype=dtype, seed=seed + 3)

    def run(mode):
        wants = {"all": (True, True), "gate_up": (True, False), "weight": (False, True)}[which]
        ins = [t.detach().clone().requires_grad_(want) for t, want in zip((gu, w), wants)]
        bl = b.detach().clone().requires_grad_(wants[1]) if b is not None else None
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
            if mode == "apart":
                y = ops.linear(ops.silu_mul(ins[0]), ins[1], bl, row_parallel=True)
            else:
                y = ops.silu_mul_linear(ins[0], ins[1], bl, keep_act=mode == "keep")
        grads = torch.autograd.grad(y, [t for t in (*ins, bl) if t is not None and t.requires_grad], dy)
        return [y, *grads], saved

    want, _ = run("apart")
    for mode in ("keep", "rebuild"):
        got, saved = run(mode)
        assert all(torch.equal(a, c) for a, c in zip(got, want, strict=True)), mode
        kept = [(m, 2 * i), (n, i)] + [(n,)] * bias + [(m, i)] * (mode == "keep")
        assert sorted(saved) == sorted(kept), (mode, saved)


@on_backends
@SETTINGS
@given(t=st.integers(0, 9), h=st.integers(1, 4), d=st.sampled_from([2, 16, 64, 128]), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 999), in_place=st.booleans())
def test_rms_norm_rope_is_the_norm_then_the_rope(backend, t, h, d, dtype, seed, in_place):
    """Qwen3's fused per-head q/k norm + RoPE returns exactly rope(rms_norm(x)), for heads read in
    place inside wider rows (the qkv projection's) or contiguous, and its gradients are the two
    ops'."""
    use(backend)
    rows = rand(t, (h + 2) * d, dtype=dtype, seed=seed, scale=3)
    x = rows[:, d:(h + 1) * d].view(t, h, d) if in_place else rows[:, :h * d].reshape(t, h, d).contiguous()
    w = rand(d, dtype=dtype, seed=seed + 1)
    table = rope_table(d, 64, {"rope_type": "default", "rope_theta": 1e4}).to(DEV)
    pos = torch.randint(0, 64, (t,), generator=torch.Generator().manual_seed(seed)).to(DEV)
    gy = rand(t, h, d, seed=seed + 2)

    def run(fused):
        xl, wl = (v.detach().clone().requires_grad_() for v in (x, w))
        y = ops.rms_norm_rope(xl, wl, 1e-6, pos, table) if fused else ops.rope(ops.rms_norm(xl, wl, 1e-6), pos, table)
        return (y, *torch.autograd.grad(y, (xl, wl), gy.to(y.dtype)))

    for name, a, b in zip(("y", "dx", "dw"), run(True), run(False), strict=True):
        assert torch.equal(a, b), name


@on_backends
@SETTINGS
@given(t=st.integers(0, 9), hq=st.integers(1, 4), hk=st.integers(1, 2), d=st.sampled_from([2, 16, 64, 128]),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 999))
def test_qk_norm_rope_is_rms_norm_rope_of_q_and_of_k(backend, t, hq, hk, d, dtype, seed):
    """Both of a layer's q/k norms + RoPE in one op (q and k as the qkv projection's adjacent views)
    return exactly ``rms_norm_rope`` of each, with each's gradients."""
    use(backend)
    rows = rand(t, (hq + 2 * hk) * d, dtype=dtype, seed=seed, scale=3)
    wq, wk = rand(d, dtype=dtype, seed=seed + 1), rand(d, dtype=dtype, seed=seed + 2)
    table = rope_table(d, 64, {"rope_type": "default", "rope_theta": 1e4}).to(DEV)
    pos = torch.randint(0, 64, (t,), generator=torch.Generator().manual_seed(seed)).to(DEV)
    gq, gk = rand(t, hq, d, seed=seed + 3), rand(t, hk, d, seed=seed + 4)

    def run(fused):
        rl, wql, wkl = (v.detach().clone().requires_grad_() for v in (rows, wq, wk))
        q, k = rl[:, :hq * d].view(t, hq, d), rl[:, hq * d:(hq + hk) * d].view(t, hk, d)
        ys = (ops.qk_norm_rope(q, k, wql, wkl, 1e-6, pos, table) if fused else
              (ops.rms_norm_rope(q, wql, 1e-6, pos, table), ops.rms_norm_rope(k, wkl, 1e-6, pos, table)))
        return (*ys, *torch.autograd.grad(ys, (rl, wql, wkl), (gq.to(dtype), gk.to(dtype))))

    for name, a, b in zip(("yq", "yk", "drows", "dwq", "dwk"), run(True), run(False), strict=True):
        assert torch.equal(a, b), name


def _grads(fn, *inputs):
    leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*leaves)
    out = out[0] if isinstance(out, tuple) else out
    (out.float() * torch.linspace(-1, 1, out.numel(), device=out.device).view_as(out)).sum().backward()
    return [x.grad for x in leaves if x.grad is not None]


CASES = {
    "linear": (lambda x, w, b: ops.linear(x, w, b),
               lambda dt: (rand(33, 40, dtype=dt), rand(17, 40, dtype=dt, seed=1), rand(17, dtype=dt, seed=2))),
    "linear_row_parallel": (lambda x, w, b: ops.linear(x, w, b, row_parallel=True),
                            lambda dt: (rand(33, 40, dtype=dt), rand(17, 40, dtype=dt, seed=1),
                                        rand(17, dtype=dt, seed=2))),
    "embedding": (lambda w: ops.embedding(torch.tensor([3, 1, 3, 0, 3, 1], device=DEV), w),
                  lambda dt: (rand(5, 8, dtype=dt),)),
    "add_rms_norm": (lambda x, r, w: ops.add_rms_norm(x, r, w, 1e-6)[0] + ops.add_rms_norm(x, r, w, 1e-6)[1],
                     lambda dt: (rand(13, 40, dtype=dt), rand(13, 40, dtype=dt, seed=1), rand(40, dtype=dt, seed=2))),
    "rms_norm": (lambda x, w: ops.rms_norm(x, w, 1e-6),
                 lambda dt: (rand(33, 40, dtype=dt), rand(40, dtype=dt, seed=1))),
    "rms_norm_rope": (lambda x, w: ops.rms_norm_rope(x, w, 1e-6, torch.arange(9, device=DEV),
                                                     rope_table(16, 32, {"rope_type": "default",
                                                                         "rope_theta": 1e4}).to(DEV)),
                      lambda dt: (rand(9, 2, 16, dtype=dt), rand(16, dtype=dt, seed=1))),
    "qk_norm_rope": (lambda r, wq, wk: torch.cat([y.flatten(1) for y in ops.qk_norm_rope(
                         r[:, :32].view(9, 2, 16), r[:, 32:48].view(9, 1, 16), wq, wk, 1e-6,
                         torch.arange(9, device=DEV), rope_table(16, 32, {"rope_type": "default",
                                                                          "rope_theta": 1e4}).to(DEV))], 1),
                     lambda dt: (rand(9, 64, dtype=dt), rand(16, dtype=dt, seed=1), rand(16, dtype=dt, seed=2))),
    "silu_mul": (ops.silu_mul, lambda dt: (rand(33, 34, dtype=dt, scale=3),)),
    "rope": (lambda x: ops.rope(x, torch.arange(9, device=DEV),
                                      rope_table(16, 32, {"rope_type": "default", "rope_theta": 1e4}).to(DEV)),
             lambda dt: (rand(9, 2, 16, dtype=dt),)),
    "attention": (lambda q, k, v: ops.varlen_attention(q, k, v, torch.tensor([0, 5, 12, 20], device=DEV), 0.25),
                  lambda dt: (rand(20, 4, 16, dtype=dt), rand(20, 2, 16, dtype=dt, seed=1),
                              rand(20, 2, 16, dtype=dt, seed=2))),
    "logprob_head": (lambda h, w: ops.logprob_head(h, w, torch.arange(11, device=DEV) * 50 % 600, 600, True)[0]
                     + ops.logprob_head(h, w, torch.arange(11, device=DEV) * 50 % 600, 600, True)[1],
                     lambda dt: (rand(11, 24, dtype=dt), rand(600, 24, dtype=dt, seed=1))),
}


@on_backends
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_backward_is_deterministic(backend, name, dtype):
    use(backend)
    fn, make = CASES[name]
    inputs = make(dtype)
    g1, g2 = _grads(fn, *inputs), _grads(fn, *inputs)
    torch.set_num_threads(1)
    g3 = _grads(fn, *inputs)
    assert g1 and all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(g1, g2, g3))


@SETTINGS
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=6), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 999))
def test_attention_batched_decode_equals_single(lengths, dtype, seed):
    """The batched form (one decode token per sequence, contexts zero-padded to the longest)
    gives each sequence the bits of its own unbatched call."""
    use("reference")
    ks = [rand(n, 2, 32, dtype=dtype, seed=seed + i) for i, n in enumerate(lengths)]
    vs = [rand(n, 2, 32, dtype=dtype, seed=seed + 50 + i) for i, n in enumerate(lengths)]
    q = rand(len(lengths), 1, 4, 32, dtype=dtype, seed=seed + 99)
    lmax = max(lengths)
    pad = lambda t: torch.cat([t, torch.zeros(lmax - t.shape[0], *t.shape[1:], dtype=dtype)])  # noqa: E731
    pos = torch.tensor(lengths)[:, None] - 1
    batched = ops.attend(q, torch.stack([pad(k) for k in ks]), torch.stack([pad(v) for v in vs]), pos, 32 ** -0.5)
    for i in range(len(lengths)):
        single = ops.attend(q[i], ks[i], vs[i], pos[i], 32 ** -0.5)
        assert torch.equal(batched[i], single)
