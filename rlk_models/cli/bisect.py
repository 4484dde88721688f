"""Divergence bisector: replay the same tokens through two runs and name the first op whose
outputs differ, with where (layer, op, token) and by how much.

A run records, in execution order, the inputs and outputs of every op application of the
shared decoder (embedding, each layer's norms, qkv_proj, q/k norm (Qwen3: norm and RoPE are one op), attention, o_proj,
gate_up_proj, down_proj, final norm), per token (rows ordered by position), plus the final
log-probs. Runs:

    train:DIR                   the HF-style training class (one full-sequence pass)
    vllm:DIR[:CONFIG]           a real in-process vLLM engine, prompt = the tokens: the rlk
                                vLLM class for an rlk checkpoint, stock vLLM for a transformers
                                one (``CONFIG`` from ``rlk_models.cli.parity.CONFIGS``, e.g.
                                ``chunked_prefill_16``: then the trace is stitched from chunks)
    stock:DIR                   stock transformers on a transformers checkpoint (its q/k/v and
                                gate/up projections are concatenated into rlk's fused names)

Any run takes ``@backend`` (``train:DIR@reference``) to force an op backend. Between two
records the inputs of an op differing first means the step in between diverged: the input of
``attn`` (q, k) follows RoPE, the input of ``down_proj`` follows SiLU-mul.

    rlk-bisect train:ckpt-rlk vllm:ckpt-rlk:chunked_prefill_16 --tokens 5,17,33,250,11
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field

import torch

from .common import add_imports, add_verbose, import_modules, one_line_errors

LEAVES = ("embed_tokens", "input_layernorm", "qkv_proj", "q_norm", "k_norm", "attn", "o_proj",
          "post_attention_layernorm", "gate_up_proj", "down_proj", "norm")
_STOCK_FUSED = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
                "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}


@dataclass
class Trace:
    """(record name, [T, ...] tensor) in execution order."""
    records: dict[str, torch.Tensor] = field(default_factory=dict)

    def add(self, name: str, t: torch.Tensor) -> None:
        self.records[name] = t.detach().float().reshape(t.shape[0], -1).clone()


class _Recorder:
    """Forward hooks on the decoder's leaf modules; every call's rows are kept by position, so
    a run split over several forward calls (chunked prefill) stitches into one [T, ...]."""

    def __init__(self, root: torch.nn.Module, stock: bool = False):
        self.stock = stock
        self.calls: dict[str, dict[int, list[torch.Tensor]]] = {}
        self.order: list[str] = []
        self.positions: torch.Tensor | None = None
        self.handles = []
        for name, mod in root.named_modules():
            leaf = name.rsplit(".", 1)[-1]
            if stock and leaf in _STOCK_FUSED:
                base, part = _STOCK_FUSED[leaf]
                self.handles.append(mod.register_forward_hook(self._hook(name[: -len(leaf)] + base, part)))
            elif leaf in LEAVES:
                self.handles.append(mod.register_forward_hook(self._hook(name, None)))

    def _keep(self, key: str, t: torch.Tensor) -> None:
        if key not in self.calls:
            self.calls[key] = {}
            self.order.append(key)
        rows = t[0] if self.stock else t  # stock models keep a batch dim: [1, T, ...]
        pos = self.positions if self.positions is not None else torch.arange(rows.shape[0])
        for i in range(min(rows.shape[0], pos.shape[0])):
            self.calls[key].setdefault(int(pos[i]), []).append(rows[i].detach().float().clone())

    def _hook(self, name: str, part: int | None):
        def hook(mod, args, out):
            stream = None  # an rlk norm with a residual: (norm of the sum, the sum) -- the sum is its input
            if isinstance(out, tuple):
                if name.endswith("norm") and len(out) == 2 and len(args) == 2:
                    stream = out[1]
                out = out[0]
            if part is not None:  # stock: one slice of a fused rlk projection
                self._keep(f"{name}:out#{part}", out)
                return
            if name.endswith(".attn"):
                for tag, t in zip(("in.q (after rope)", "in.k (after rope)", "in.v"), args[:3]):
                    self._keep(f"{name}:{tag}", t)
            elif stream is not None:
                self._keep(f"{name}:in", stream)
            elif args and isinstance(args[0], torch.Tensor) and args[0].is_floating_point():
                self._keep(f"{name}:in", args[0])
            self._keep(f"{name}:out", out)
        return hook

    def trace(self) -> Trace:
        tr = Trace()
        fused: dict[str, dict[int, torch.Tensor]] = {}  # stock q/k/v (gate/up) slices of one rlk record
        for key in self.order:
            by_pos = self.calls[key]
            rows = torch.stack([by_pos[p][-1] for p in sorted(by_pos)])  # last write wins (recompute)
            if "#" in key:
                fused.setdefault(key.split("#")[0], {})[int(key.split("#")[1])] = rows
                base = key.split("#")[0]
                parts = fused[base]
                if len(parts) == (3 if "qkv" in base else 2):
                    tr.add(base, torch.cat([parts[i].reshape(rows.shape[0], -1) for i in sorted(parts)], -1))
                continue
            tr.add(key, rows)
        return tr

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def _parse(spec: str) -> tuple[str, str, str | None, str | None]:
    spec, _, backend = spec.partition("@")
    kind, _, rest = spec.partition(":")
    path, _, config = rest.partition(":") if kind == "vllm" else (rest, "", "")
    if kind not in ("train", "vllm", "stock") or not path:
        raise ValueError(f"bad run {spec!r}: use train:DIR, vllm:DIR[:CONFIG] or stock:DIR (optionally @backend)")
    return kind, path, config or None, backend or None


def run_trace(spec: str, tokens: list[int], dtype: str = "float32", model=None) -> tuple[Trace, torch.Tensor]:
    """Trace ``tokens`` through run ``spec``; returns (trace, fp32 log-probs of tokens[1:])."""
    from transformers import AutoModelForCausalLM

    import rlk_models  # noqa: F401

    kind, path, config, backend = _parse(spec)
    extra = {"rlk_backend": backend} if backend else {}
    ids = torch.tensor(tokens)
    if kind in ("train", "stock"):
        if model is None:
            if kind == "train":
                extra["rlk_check_fingerprint"] = False  # comparing numerics is the point here
            model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), **extra).eval()
        rec = _Recorder(model, stock=(kind == "stock"))
        try:
            with torch.no_grad():
                if kind == "train":
                    lp = model.token_logprobs(ids[None])[0]
                else:
                    logits = model(ids[None]).logits[0, :-1].float()
                    lp = logits.log_softmax(-1).gather(1, ids[1:, None])[:, 0]
        finally:
            rec.close()
        return rec.trace(), lp
    return _vllm_trace(path, config, backend, tokens, dtype)


_ENGINE_RECORDER: list = []


def _install(model) -> None:
    rec = _Recorder(model)

    def pre(mod, args, kwargs):
        from vllm.forward_context import get_forward_context

        md = get_forward_context().attn_metadata
        if not md:  # profiling / warm-up: nothing to record
            rec.positions = torch.zeros(0, dtype=torch.long)
            return
        first = next(iter(md.values())) if isinstance(md, dict) else md
        positions = kwargs.get("positions", args[1] if len(args) > 1 else None)
        rec.positions = positions[: first.num_actual_tokens].cpu()

    rec.handles.append(model.register_forward_pre_hook(pre, with_kwargs=True))
    _ENGINE_RECORDER.append(rec)


def _vllm_trace(path: str, config: str | None, backend: str | None, tokens: list[int], dtype: str):
    from vllm.inputs import TokensPrompt

    from ..rollout import engine, parity

    engine.in_process_env()
    overrides = dict(parity.CONFIGS[config][0]) if config else {}
    if engine.is_rlk_checkpoint(path):  # else: stock vLLM on a transformers checkpoint
        overrides["hf_overrides"] = {"rlk_check_fingerprint": False, **({"rlk_backend": backend} if backend else {})}
    llm = engine.make_llm(path, dtype, **overrides)
    try:
        _ENGINE_RECORDER.clear()
        llm.apply_model(_install)
        out = llm.generate([TokensPrompt(prompt_token_ids=tokens)], parity.sampling_params("greedy", 1, True),
                           use_tqdm=False)[0]
        rec = _ENGINE_RECORDER[0]
        rec.close()
        lp = torch.tensor([out.prompt_logprobs[j][tokens[j]].logprob for j in range(1, len(tokens))])
        return rec.trace(), lp
    finally:
        engine.close_llm(llm)


@dataclass
class Divergence:
    record: str
    token: int
    count: int
    elements: int
    max_abs_diff: float

    def __str__(self) -> str:
        layer, _, op = self.record.partition(":")
        return (f"first divergence: {layer} [{op}] at token {self.token}: {self.count}/{self.elements} elements "
                f"differ, max |diff| = {self.max_abs_diff:.3g}")


def first_divergence(a: Trace, b: Trace) -> Divergence | None:
    """The first record (in a's execution order) present in both traces whose tensors differ."""
    for name, ta in a.records.items():
        tb = b.records.get(name)
        if tb is None or tb.shape != ta.shape:
            continue
        neq = ta != tb
        if neq.any():
            tok = int(neq.any(dim=1).nonzero()[0, 0])
            return Divergence(name, tok, int(neq.sum()), neq.numel(), float((ta - tb).abs().max()))
    return None


@one_line_errors("rlk-bisect")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rlk-bisect", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("a", help="first run")
    ap.add_argument("b", help="second run")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids to replay")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    add_imports(ap)
    add_verbose(ap)
    args = ap.parse_args(argv)
    import_modules(args)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    tokens = [int(t) for t in args.tokens.split(",")]
    ta, la = run_trace(args.a, tokens, args.dtype)
    tb, lb = run_trace(args.b, tokens, args.dtype)
    common = [n for n in ta.records if n in tb.records]
    print(f"compared {len(common)} op records over {len(tokens)} tokens")
    d = first_divergence(ta, tb)
    lp_mism = int((la != lb).sum())
    print(f"log-probs: {lp_mism}/{la.numel()} differ, max |diff| = {float((la - lb).abs().max()):.3g}")
    print(d if d else "no divergence: every recorded op output is bitwise equal")
    return 1 if (d or lp_mism) else 0


if __name__ == "__main__":
    sys.exit(main())
