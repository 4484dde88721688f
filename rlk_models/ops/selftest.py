"""Fail-closed self-test: does the selected op backend keep the contract on *this* machine?

``self_test(backend)`` runs quick bitwise checks of every op (a row alone equals the same row
inside a batch at several positions; 1 vs 2 threads on CPU; repeated runs; attention prefill
vs chunked vs decode; the log-prob head vs full log-probs) in float32 and bfloat16, in about a
second. The verdict is cached per machine (CPU model and flags, GPU name), library version and
backend fingerprint under ``$RLK_CACHE_DIR`` (default ``~/.cache/rlk_models``).

Strict mode -- ``rlk_strict=True`` in the model config (``from_pretrained(..., rlk_strict=True)``
or vLLM ``hf_overrides``) -- makes both model classes run it at load and refuse to build when
it fails: ``SelfTestFailed`` names the failing checks.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
from pathlib import Path

import torch

from . import get_backend, rope_table
from .paged import slots_for, write_kv


class SelfTestFailed(RuntimeError):
    pass


def _cache_dir() -> Path:
    return Path(os.environ.get("RLK_CACHE_DIR", Path.home() / ".cache" / "rlk_models"))


def machine_key(backend: str) -> str:
    from .. import __version__

    cpu = ""
    try:
        info = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
        cpu = "\n".join(ln for ln in info.splitlines() if ln.startswith(("model name", "flags")))
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    blob = json.dumps([platform.machine(), cpu, gpu, torch.__version__, __version__,
                       get_backend(backend).FINGERPRINT], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _rand(shape, dtype, seed, device="cpu"):
    g = torch.Generator("cpu").manual_seed(seed)  # CPU draws (same numbers on every device), then moved
    return torch.randn(*shape, generator=g, device="cpu").to(device=device, dtype=dtype)


def _rows_ok(fn, x: torch.Tensor) -> bool:
    """fn(x)[i] == fn(x[i:i+1]) and == fn(batch with x[i] at another position), for all i."""
    full = fn(x)
    rev = fn(x.flip(0)).flip(0)
    return all(torch.equal(fn(x[i:i + 1])[0], full[i]) for i in range(x.shape[0])) and torch.equal(rev, full)


def _paged_decode_ok(ops, q, kv, full) -> bool:
    """Every token decoded alone against a paged cache (block size 8, blocks in reverse order)
    equals its row of the full-sequence attention."""
    n, hkv, d = kv.shape
    cache = torch.zeros(4, hkv, 8, 2 * d, dtype=kv.dtype, device=kv.device)
    table = torch.tensor([[3, 2, 1, 0]], dtype=torch.int32, device=kv.device)
    write_kv(cache, kv, kv, slots_for(table[0], torch.arange(n, device=kv.device), 8))
    qsl = torch.tensor([0, 1], dtype=torch.int32, device=kv.device)
    return all(torch.equal(ops.paged_attention(q[t:t + 1], cache, table, torch.tensor([t + 1], device=kv.device),
                                               qsl, d ** -0.5), full[t:t + 1]) for t in range(n))


def _add_norm_ok(ops, x, r, w) -> bool:
    """The fused residual add + norm is exactly the add and then the norm, and row-invariant."""
    y, s = ops.add_rms_norm(x, r, w, 1e-6)
    return (torch.equal(s, x + r) and torch.equal(y, ops.rms_norm(x + r, w, 1e-6))
            and _rows_ok(lambda t: torch.cat(ops.add_rms_norm(*t.chunk(2, -1), w, 1e-6), -1), torch.cat([x, r], -1)))


def _norm_rope_ok(ops, x, w, pos, table) -> bool:
    """The fused per-head norm + RoPE is exactly the norm and then the rope, and row-invariant."""
    y = ops.rms_norm_rope(x, w, 1e-6, pos, table)
    return (torch.equal(y, ops.rope(ops.rms_norm(x, w, 1e-6), pos, table))
            and torch.equal(ops.rms_norm_rope(x[:5], w, 1e-6, pos[:5], table), y[:5]))


def _qk_norm_rope_ok(ops, qkv, wq, wk, pos, table) -> bool:
    """Both q/k norms + RoPE in one op are exactly the fused op on each, and row-invariant."""
    def qk(rows):
        t = rows.shape[0]
        return ops.qk_norm_rope(rows[:, :96].view(t, 3, 32), rows[:, 96:128].view(t, 1, 32), wq, wk, 1e-6,
                                pos[:t], table)

    yq, yk = qk(qkv)
    t = qkv.shape[0]
    return (torch.equal(yq, ops.rms_norm_rope(qkv[:, :96].view(t, 3, 32), wq, 1e-6, pos, table))
            and torch.equal(yk, ops.rms_norm_rope(qkv[:, 96:128].view(t, 1, 32), wk, 1e-6, pos, table))
            and all(torch.equal(a, b[:5]) for a, b in zip(qk(qkv[:5]), (yq, yk))))


def _checks(ops, dtype) -> dict[str, bool]:
    dev = torch.device(getattr(ops, "DEVICE", "cpu"))
    rand = functools.partial(_rand, device=dev)
    m, k, n = 37, 96, 80
    x, w, b = rand((m, k), dtype, 1), rand((n, k), dtype, 2), rand((n,), dtype, 3)
    table = rope_table(32, 64, {"rope_type": "default", "rope_theta": 1e4}).to(dev)
    pos = torch.arange(m, device=dev) % 64
    q, kv = rand((24, 4, 32), dtype, 4), rand((24, 2, 32), dtype, 5)
    full = ops.varlen_attention(q, kv, kv, torch.tensor([0, 24], device=dev), 32 ** -0.5)
    tgt = torch.arange(m, device=dev) * 13 % 600
    wh = rand((600, k), dtype, 6)
    lp, _ = ops.logprob_head(x, wh, tgt, 600)
    out = {
        "linear": _rows_ok(lambda t: ops.linear(t, w, b), x),
        "linear_row_parallel": _rows_ok(lambda t: ops.linear(t, w, b, row_parallel=True), x),
        "rms_norm": _rows_ok(lambda t: ops.rms_norm(t, w[:, 0], 1e-6), rand((m, n), dtype, 7)),
        "add_rms_norm": _add_norm_ok(ops, rand((m, n), dtype, 10), rand((m, n), dtype, 11), rand((n,), dtype, 12)),
        "silu_mul": _rows_ok(ops.silu_mul, rand((m, 2 * n), dtype, 8) * 4),
        "rope": torch.equal(ops.rope(rand((m, 2, 32), dtype, 9)[:5], pos[:5], table),
                            ops.rope(rand((m, 2, 32), dtype, 9), pos, table)[:5]),
        "rms_norm_rope": _norm_rope_ok(ops, rand((m, 2, 32), dtype, 13), rand((32,), dtype, 14), pos, table),
        "qk_norm_rope": _qk_norm_rope_ok(ops, rand((m, 5 * 32), dtype, 15), rand((32,), dtype, 14),
                                         rand((32,), dtype, 16), pos, table),
        "attention_decode": _paged_decode_ok(ops, q, kv, full),
        "logprob_head": _rows_ok(lambda t: ops.full_logprobs(t, wh, 600), x)
        and torch.equal(ops.full_logprobs(x, wh, 600).gather(1, tgt[:, None])[:, 0], lp),
        "run_to_run": torch.equal(ops.linear(x, w, b), ops.linear(x, w, b)),
    }
    if x.device.type == "cpu":
        before = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            one = ops.linear(x, w, b)
            torch.set_num_threads(2)
            out["threads_1_vs_2"] = torch.equal(one, ops.linear(x, w, b))
        finally:
            torch.set_num_threads(before)
    return out


def self_test(backend: str, use_cache: bool = True) -> dict:
    """{"ok": bool, "failed": [check names], "key": machine key}; cached per machine."""
    key = machine_key(backend)
    path = _cache_dir() / f"selftest-{backend}-{key}.json"
    if use_cache and path.exists():
        return json.loads(path.read_text())
    ops = get_backend(backend)
    # real tensors on the backend's device, whatever device context the caller is in (transformers
    # builds models under torch.device("meta"), where strict mode runs this)
    with torch.device(getattr(ops, "DEVICE", "cpu")):
        failed = [f"{name}[{str(dt).removeprefix('torch.')}]" for dt in (torch.float32, torch.bfloat16)
                  for name, ok in _checks(ops, dt).items() if not ok]
    result = {"ok": not failed, "failed": failed, "key": key, "backend": backend}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, path)
    return result


def require_self_test(backend: str) -> None:
    result = self_test(backend)
    if not result["ok"]:
        raise SelfTestFailed(f"op backend {backend!r} breaks the numerical contract on this machine "
                             f"(failed: {', '.join(result['failed'])}); strict mode refuses to run. "
                             f"Cached verdict: {_cache_dir()}/selftest-{backend}-{result['key']}.json")


def maybe_require(config) -> None:
    if getattr(config, "rlk_strict", False):
        require_self_test(config.rlk_backend)
