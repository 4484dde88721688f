"""Kernel launches of one decoder forward, counted on CPU: every Triton kernel launch (under
``TRITON_INTERPRET=1``, the same host code as on the GPU) and every ATen op that runs a kernel of its
own (copies, adds, allocations excluded), per layer, for a tiny Qwen3 with the triton backend. The
count is what a decode step's CUDA graph replays per layer; it depends on the code, not the device.

    TRITON_INTERPRET=1 python benchmarks/launch_count.py [--tokens 4] [--family qwen3|llama]
"""

from __future__ import annotations

import argparse
import collections
import json
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

# ATen ops that launch no kernel (views, metadata, allocation)
FREE = ("view", "reshape", "_reshape_alias", "split", "slice", "select", "as_strided", "empty", "unsqueeze",
        "squeeze", "detach", "alias", "t.", "transpose", "permute", "expand", "_unsafe_view", "lift_fresh",
        "new_empty", "is_same_size", "sym_", "item", "_local_scalar_dense", "result_type", "lift", "stride",
        "size", "numel", "dim", "is_")


class _Count(TorchDispatchMode):
    """ATen ops the model's own code runs (not the interpreter's, which emulates a kernel with them)."""

    def __init__(self):
        super().__init__()
        self.aten = collections.Counter()
        self.in_kernel = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket.__name__) + "." + func._overloadname
        if not self.in_kernel and not any(name.startswith(f) for f in FREE):
            self.aten[name] += 1
        return func(*args, **(kwargs or {}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--family", default="qwen3", choices=["qwen3", "llama"])
    ap.add_argument("--layers", type=int, default=2)
    a = ap.parse_args()
    import triton.runtime.interpreter as interp

    from rlk_models.families import FAMILIES
    from rlk_models.modeling.decoder import VarlenMeta

    launches = collections.Counter()
    run = interp.InterpretedFunction.run
    mode = _Count()

    def counted(self, *args, **kwargs):
        launches[self.fn.__name__] += 1
        mode.in_kernel = True
        try:
            return run(self, *args, **kwargs)
        finally:
            mode.in_kernel = False

    interp.InterpretedFunction.run = counted
    fam = FAMILIES[a.family]
    cfg = fam.config_cls(hidden_size=64, intermediate_size=128, num_hidden_layers=a.layers, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=32, vocab_size=256, rlk_backend="triton")
    torch.manual_seed(0)
    model = fam.training_cls(cfg).eval()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.05)
    ids = torch.randint(0, 256, (a.tokens,))
    pos = torch.arange(a.tokens)
    meta = VarlenMeta(torch.tensor([0, a.tokens], dtype=torch.int32))
    counts = {}
    with torch.no_grad():
        model.model(ids, pos, meta)  # warm-up: the rope table, first-call work
    for n in (a.layers, 2 * a.layers):  # per layer: the difference between two depths
        model.model.layers.extend([model.model.layers[-1]] * (n - len(model.model.layers)))
        launches.clear()
        mode.aten.clear()
        with torch.no_grad(), mode:
            model.model(ids, pos, meta)
        counts[n] = (sum(launches.values()), sum(mode.aten.values()), dict(launches), dict(mode.aten))
    lo, hi = counts[a.layers], counts[2 * a.layers]
    per_layer = {"triton": (hi[0] - lo[0]) / a.layers, "aten": (hi[1] - lo[1]) / a.layers}
    print(json.dumps({"family": a.family, "tokens": a.tokens, "per_layer": per_layer,
                      "triton_kernels_at_depth_" + str(2 * a.layers): hi[2], "aten_ops": hi[3]}, indent=1))


if __name__ == "__main__":
    main()
