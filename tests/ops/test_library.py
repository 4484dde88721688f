"""The ops as torch custom ops (``rlk_models.ops.library``, ``get_backend("opaque:NAME")``):
``torch.library.opcheck`` (schema, fake implementation against the real one, no aliasing), the
same bits as calling the backend directly, and a torch.compile'd function over them equal to eager
bit for bit -- Inductor compiles the glue and leaves each op whole. (Triton: under the
interpreter on CPU, natively on a GPU.)"""

import pytest
import torch

from rlk_models.ops import BackendUnavailable, get_backend, rope_table

DEV = "cuda" if torch.cuda.is_available() else "cpu"
BACKENDS = ["reference", "triton"]


def _args(g, dtype):
    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dtype).to(DEV)
    x, w, b = r(7, 512), r(24, 512, scale=0.1), r(24)
    table = rope_table(32, 64, {"rope_type": "default", "rope_theta": 1e4}).to(DEV)
    qkv = r(7, 5 * 32)  # q's 3 heads, then k's 1, in the qkv rows (and v's 1)
    return dict(x=x, x2=r(7, 512), w=w, b=b, norm_w=r(512), heads=r(7, 3, 32), head_w=r(32), head_w2=r(32),
                q=qkv[:, :96].view(7, 3, 32), k=qkv[:, 96:128].view(7, 1, 32),
                pos=torch.arange(7, device=DEV) * 3, table=table, gate_up=r(7, 48))


@pytest.mark.parametrize("name", BACKENDS)
def test_custom_ops_pass_opcheck_and_equal_the_backend(name):
    real, opaque = get_backend(name), get_backend(f"opaque:{name}")
    dt = torch.float32 if name == "triton" and DEV == "cpu" else torch.bfloat16  # interpreter: no bf16
    a = _args(torch.Generator().manual_seed(0), dt)
    parts = torch.stack([real.shard_partial(a["x"][:, r * 256:(r + 1) * 256], a["w"][:, r * 256:(r + 1) * 256], 2)
                         for r in range(2)])
    cases = {
        "linear": ((a["x"], a["w"], a["b"], None, True, name), real.linear(a["x"], a["w"], a["b"], row_parallel=True),
                   opaque.linear(a["x"], a["w"], a["b"], row_parallel=True)),
        "rms_norm": ((a["x"], a["norm_w"], 1e-6, name), real.rms_norm(a["x"], a["norm_w"], 1e-6),
                     opaque.rms_norm(a["x"], a["norm_w"], 1e-6)),
        "add_rms_norm": ((a["x"], a["x2"], a["norm_w"], 1e-6, name),
                         real.add_rms_norm(a["x"], a["x2"], a["norm_w"], 1e-6),
                         opaque.add_rms_norm(a["x"], a["x2"], a["norm_w"], 1e-6)),
        "rope": ((a["heads"], a["pos"], a["table"], name), real.rope(a["heads"], a["pos"], a["table"]),
                 opaque.rope(a["heads"], a["pos"], a["table"])),
        "rms_norm_rope": ((a["heads"], a["head_w"], 1e-6, a["pos"], a["table"], name),
                          real.rms_norm_rope(a["heads"], a["head_w"], 1e-6, a["pos"], a["table"]),
                          opaque.rms_norm_rope(a["heads"], a["head_w"], 1e-6, a["pos"], a["table"])),
        "qk_norm_rope": ((a["q"], a["k"], a["head_w"], a["head_w2"], 1e-6, a["pos"], a["table"], name),
                         real.qk_norm_rope(a["q"], a["k"], a["head_w"], a["head_w2"], 1e-6, a["pos"], a["table"]),
                         opaque.qk_norm_rope(a["q"], a["k"], a["head_w"], a["head_w2"], 1e-6, a["pos"], a["table"])),
        "silu_mul": ((a["gate_up"], name), real.silu_mul(a["gate_up"]), opaque.silu_mul(a["gate_up"])),
        "shard_partial": ((a["x"][:, 256:], a["w"][:, 256:], 2, name), parts[1],
                          opaque.shard_partial(a["x"][:, 256:], a["w"][:, 256:], 2)),
        "combine_partials": ((parts, a["b"], dt, name), real.combine_partials(parts, a["b"], dt),
                             opaque.combine_partials(parts, a["b"], dt)),
    }
    for op, (args, want, got) in cases.items():
        torch.library.opcheck(getattr(torch.ops.rlk, op).default, args,
                              test_utils=("test_schema", "test_faketensor"))
        assert all(map(torch.equal, got, want)) if isinstance(want, tuple) else torch.equal(got, want), op
    assert opaque.FINGERPRINT == real.FINGERPRINT and opaque.NAME == name
    assert opaque.full_logprobs is real.full_logprobs  # ops a compiled forward never calls: the backend's own


def test_opaque_backend_hides_the_eager_only_unfolded_linear():
    """``linear_unfolded`` (triton: the vLLM class's row-parallel layers at TP=1 hand their split-K partials to the
    next add_rms_norm) returns no tensor; under ``opaque:`` (vLLM's compiled path) the layer must fold in
    ``rlk::linear`` instead, so the opaque backend has no such op and the vLLM method's ``hasattr`` check fails."""
    triton_ops = pytest.importorskip("rlk_models.ops.triton")
    assert hasattr(triton_ops, "linear_unfolded")
    opaque = get_backend("opaque:triton")
    assert not hasattr(opaque, "linear_unfolded")
    with pytest.raises(AttributeError, match="not in a compiled forward"):
        opaque.linear_unfolded  # noqa: B018
    assert opaque.combine_partials  # the others still resolve


def test_compiled_function_over_the_ops_equals_eager():
    """A decoder-like block (norm, linear, SiLU-mul, row-parallel linear, residual add + norm) through the
    opaque reference backend: torch.compile (Inductor) gives eager's bits."""
    ops = get_backend("opaque:reference")
    g = torch.Generator().manual_seed(1)
    h = torch.randn(9, 64, generator=g).bfloat16()
    nw, w1, w2 = (torch.randn(*s, generator=g).bfloat16() * 0.2 for s in ((64,), (256, 64), (64, 128)))

    def block(h):
        y = ops.linear(ops.rms_norm(h, nw, 1e-6), w1)
        out, stream = ops.add_rms_norm(ops.linear(ops.silu_mul(y), w2, row_parallel=True), h, nw, 1e-6)
        return out + stream

    assert torch.equal(torch.compile(block, fullgraph=True)(h), block(h))


def test_unknown_opaque_backend_raises():
    with pytest.raises(BackendUnavailable, match="unknown op backend 'nope'"):
        get_backend("opaque:nope")
