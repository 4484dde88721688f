"""The Gluon kernels compiled for the H200 (sm_90) on any machine, no GPU needed, with their MMA
instructions, registers, spill stack and shared memory (``matmul_sass.describe``): the log-prob
head's statistics (``head_sm90._stats_ws`` and ``_stats_pingpong``) in each form -- probabilities
kept or not, the entropy's sum or not, every ``STATS_SM90_CANDIDATES`` config -- and the matmul's fused
K-group form (``matmul_sm90._mm_groups_ws``) in every ``matmul.SM90_CANDIDATES`` config in 8 K-groups (the
row-parallel layers) and every ``SM90_PLAIN_CANDIDATES`` config in one (the plain layers), with and without
bias, bf16 and fp32 out, at the K slots ``matmul_sm90.slots`` leaves it, with 64- and (where two slots fit)
128-wide slots (``Launch.block_k``).
Gluon has no interpreter mode, so this is what the CPU can check of these kernels between device
sessions (the attention forward's Gluon kernel is built by attention_sass.py). Each form's ``ptx_digest``
(``ptx_digest``: its PTX without debug lines) tells whether a source change left the form's code as it was:
run this on two revisions and compare the digests by name (session 55: the 64 x 96 tiles' generalization left
all 98 earlier matmul forms' PTX unchanged).

    python benchmarks/triton/gluon_sass.py     # JSON; not under TRITON_INTERPRET=1 (it compiles)
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_sass import mma  # noqa: E402
from matmul_sass import build_gluon, describe  # noqa: E402

from rlk_models.ops.canonical import VOCAB_TILE  # noqa: E402
from rlk_models.ops.triton import head_sm90, matmul_sm90  # noqa: E402
from rlk_models.ops.triton.matmul import SM90_CANDIDATES, SM90_PLAIN_CANDIDATES  # noqa: E402
from rlk_models.ops.triton.utils import BLOCK_K  # noqa: E402


def stats_sm90(config: tuple = head_sm90.STATS_SM90_CONFIG, keep_probs: bool = True, with_entropy: bool = False,
               k: int = 4096):
    """``_stats_ws`` (``_stats_pingpong`` when the config says so) for sm_90, its descriptors' types from host
    descriptors over CPU tensors of the Qwen3-8B head (K = 4096, a 2048-entry vocab shard: the shapes only set
    the descriptors' types)."""
    import torch

    num_buf, consumer_regs, maxnreg, pingpong = config
    h, w = torch.empty(256, k, dtype=torch.bfloat16), torch.empty(2048, k, dtype=torch.bfloat16)
    q = torch.empty(256, 2048, dtype=torch.bfloat16) if keep_probs else None
    descs = head_sm90.descriptors(h, w, q, VOCAB_TILE, BLOCK_K)
    types = dict(tgt_ptr="*i64", m_ptr="*fp32", s_ptr="*fp32", e_ptr="*fp32", t_ptr="*fp32", T="i32", V="i32",
                 K="i32", n_stats="i32", start="i32", num_pid_m="i32", n_tiles="i32")
    consts = dict(HAS_TGT=True, WITH_E=with_entropy, KEEP_P=keep_probs, NUM_BUF=num_buf, CONSUMER_REGS=consumer_regs,
                  num_warps=4)
    return build_gluon(head_sm90._stats_pingpong if pingpong else head_sm90._stats_ws,
                       dict(zip(("h_desc", "w_desc", "q_desc"), descs)), types, consts, (), maxnreg)


def mm_groups_sm90(block_m: int = 128, block_n: int = 128, num_buf: int = 4, k: int = 4096, bias: bool = False,
                   out_dtype: str = "bf16", groups: int = 8, block_k: int = BLOCK_K):
    """``_mm_groups_ws`` for sm_90 in block_m x block_n tiles (``groups`` K-groups, 8 folded in halves; bf16
    operands; K slots ``block_k`` wide) in the form ``matmul_sm90.launch`` runs (``matmul_sm90.form``), descriptors
    from host ones over CPU tensors."""
    import torch

    a, b = torch.empty(256, k, dtype=torch.bfloat16), torch.empty(512, k, dtype=torch.bfloat16)
    c = torch.empty(256, 512, dtype={"bf16": torch.bfloat16, "fp32": torch.float32}[out_dtype])
    descs = matmul_sm90.descriptors(a, b, c, block_m, block_n, block_k)
    types = dict(bias_ptr="*bf16", M="i32", N="i32", K="i32", KG="i32")
    tile, maxnreg = matmul_sm90.form(block_m, block_n, block_k, num_buf, a.element_size(), c.element_size())
    consts = dict(HAS_BIAS=bias, GROUPS=groups, RUN=min(groups, 4), **tile, num_warps=4)
    return build_gluon(matmul_sm90._mm_groups_ws, dict(zip(("a_desc", "b_desc", "c_desc", "b2_desc", "c2_desc"),
                                                           descs)), types, consts, (), maxnreg)


def ptx_digest(kernel) -> str:
    """A digest of ``kernel``'s PTX without its debug lines (``.loc``, ``.file``, the ``.debug`` sections,
    comments), which move with the source's line numbers: equal digests, the same code."""
    lines, debug = [], False
    for line in kernel.asm["ptx"].splitlines():
        debug = debug or bool(re.match(r"\s*\.section\s+\.debug", line))
        line = line.split("//")[0].rstrip()
        if not debug and line.strip() and not re.match(r"\s*\.(loc|file)\b", line):
            lines.append(line)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def main() -> None:
    heads = {f"{c} keep_probs={kp} entropy={e}": (c, kp, e) for c in head_sm90.STATS_SM90_CANDIDATES
             for kp in (True, False) for e in (False, True)}
    def mms(launches: list, groups: int) -> dict:  # 128-wide slots where two fit (a ring of one is refused)
        return {f"{c} bias={bias} out={od}{'' if bk == BLOCK_K else f' block_k={bk}'}":
                mm_groups_sm90(c[0], c[1], c[3], 4096, bias, od, groups, bk)
                for c in sorted({lc.config for lc in launches}) for bias in (False, True) for od in ("bf16", "fp32")
                for bk in matmul_sm90.SLOT_WIDTHS
                if matmul_sm90.ring_fits(c[0], c[1], bk, c[3], 2, 4 if od == "fp32" else 2)}

    res = {"stats_sm90": {name: stats_sm90(*f) for name, f in heads.items()},
           "mm_groups_sm90": mms(SM90_CANDIDATES, 8), "mm_plain_sm90": mms(SM90_PLAIN_CANDIDATES, 1)}
    print(json.dumps({kind: {name: {**describe(k), **mma(k), "ptx_digest": ptx_digest(k)} for name, k in built.items()}
                      for kind, built in res.items()}, indent=1))


if __name__ == "__main__":
    main()
