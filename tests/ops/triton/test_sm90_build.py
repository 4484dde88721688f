"""What Triton builds for the H200 (sm_90), checked on any machine (no GPU: the compiler and
cuobjdump ship with the triton wheel; ``benchmarks/triton/attention_sass.py``, run in its own
process because this suite's kernels run under ``TRITON_INTERPRET=1``).

- Every attention launch candidate (the training kernel with TMA and with pointer loads) maps
  each ``tl.dot`` to a wgmma. The per-row bits the GPU
  tests prove (any BLOCK_M >= 64, rows on the M or the N side) hold for wgmma; an mma.sync gives
  other bits (BLOCK_M 16/32 on the H200), so a kernel change that made Triton fall back to it
  would break the paged == training contract on the GPU.
- The paged default keeps two programs an SM, unspilled, with three K/V buffers in its decode
  loop: session 15 measured decode at 1.01-1.14x FA3's time that way and 1.5-1.7x with one
  program an SM (a kernel change that adds shared memory shows here before a device session).
- ptxas keeps the wgmma pipeline asynchronous in every attention candidate, the backward's on
  the GPU's TMA path, and every matmul launch form (``matmul_sass.wgmma_serialized``). When a
  lowering copies or writes an accumulator while its wgmma is in flight (a loop-carried copy of
  scores still being computed; a wait threading a value also used after it), ptxas waits after
  every wgmma of the function and says so only in a note Triton does not show: the same bits, so
  no other test sees it, just a slower kernel. (Triton 3.6 does it to ``_bwd_dq_ds`` with pointer
  loads -- C7515, the fallback off the TMA path -- which is therefore not checked.)
- The matmul's ``Launch.block_k`` forms (candidates and defaults, 128 and 256 wide) take all the 64-wide K-tiles of
  a pipeline step in one dot (MMAs in proportion to the load) and spill nothing.
- The Gluon kernels (``benchmarks/triton/gluon_sass.py``): the log-prob head's statistics
  (``head_sm90``) and the matmul's K-group form (``matmul_sm90``: row-parallel in 8 groups, plain in
  one) build wgmmas of their tile's width, none serialized, nothing spilled in the forms they serve.
- The head's Triton statistics kernel spills no more than its measured forms did (``rowwise_sass.stats_forms``).
- No kernel divides in int64 (``benchmarks/triton/rowwise_sass.py`` builds the row-wise kernels): a
  64-bit division by a run-time value is a subroutine call a thread on sm_90, the same bits, a
  kernel several times slower when it moves bytes (session 26's q/k norm + RoPE: 0.79 TB/s)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[3]


def _sass(script: str, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "triton" / script), *args], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def built() -> dict:
    return _sass("attention_sass.py", "--backward")


def _forward_kernels(built: dict) -> dict:
    """Every training (TMA and pointer loads) and paged candidate, and the paged default at GROUP 1 and 16."""
    return {**{f"training {c}": r for c, r in built["training"].items()},
            **{f"training {c}, pointer loads": r for c, r in built["training_pointer_loads"].items()},
            **{f"training sm90 (Gluon) {d}": r for d, r in built["training_sm90"].items()},
            **{f"paged {c}": r for c, r in built["paged"].items()},
            **{f"paged default, GROUP {g}": r for g, r in built["paged_default_by_group"].items()}}


def test_every_candidate_builds_wgmma_only(built):
    kernels = _forward_kernels(built)
    assert len(kernels) >= 10
    bad = {name: (r["wgmma"], r["mma_sync"]) for name, r in kernels.items() if not r["wgmma"] or r["mma_sync"]}
    assert not bad, f"a tl.dot not built as wgmma (wgmma shapes, mma.sync count): {bad}"


def test_paged_default_runs_two_programs_an_sm_unspilled(built):
    r = built["paged"][built["defaults"]["paged"]]
    assert r["programs_per_sm"] >= 2 and r["spill_stack_bytes"] == 0, r


def test_no_default_or_candidate_serializes_its_wgmmas(built):
    kernels = {**_forward_kernels(built),
               **{f"backward {c} {k}": r for c, ks in built["backward"].items() for k, r in ks.items()}}
    assert len(kernels) >= 30
    serialized = {name: r["wgmma_serialized"] for name, r in kernels.items() if r["wgmma_serialized"]}
    assert not serialized, serialized


@pytest.fixture(scope="module")
def matmul_forms() -> dict:
    return _sass("matmul_sass.py")


def test_no_matmul_form_serializes_its_wgmmas(matmul_forms):
    assert len(matmul_forms) > 20
    serialized = {name: r["wgmma_serialized"] for name, r in matmul_forms.items() if r["wgmma_serialized"]}
    assert not serialized, serialized


def test_matmul_block_k_forms_take_their_k_tiles_in_one_dot_unspilled(matmul_forms):
    """``Launch.block_k`` beside the other K-tile loads of the same launch (each default up to 64 rows or loading
    wider than 64, with ``/block_k=64``, ``/block_k=128``, ``/block_k=256``): MMA instructions in proportion to the
    load (one dot over all the 64-wide K-tiles of a pipeline step: 128 twice 64's, 256 four times), no spill; the
    serialization and int64 checks above cover them too."""
    def load(r: dict) -> int:
        return int(re.search(r"block_k=(\d+)", r["launch"]).group(1))

    others = {name: m for name in matmul_forms if (m := re.search(r"/block_k=\d+$", name))}
    assert len(others) >= 20 and {m.group() for m in others.values()} == {"/block_k=64", "/block_k=128", "/block_k=256"}
    for name, m in others.items():
        r, base = matmul_forms[name], matmul_forms[name[:m.start()]]
        assert r["mma"] * load(base) == base["mma"] * load(r) > 0, (name, r["mma"], base["mma"])
        assert r["spill_stack_bytes"] == 0 == base["spill_stack_bytes"], name


def test_the_folds_of_partials_build_for_sm90(matmul_forms, rowwise):
    """The split launches' fold kernel (with and without a bias) and the engine's fold inside the residual add +
    RMSNorm, each for 2 and 8 partials, compile for sm_90 (session 47: a fold that ran under the interpreter failed
    to build on the GPU, and with it every split launch; the builds above had not compiled either kernel)."""
    assert {"fold/parts=2", "fold/parts=8", "fold/parts=2/bias", "fold/parts=8/bias"} <= set(matmul_forms)
    assert {f"add_rms_norm forward of {p} partials, hidden 4096" for p in (2, 8)} <= set(rowwise)


@pytest.fixture(scope="module")
def rowwise() -> dict:
    return _sass("rowwise_sass.py")


def test_no_kernel_divides_in_int64(built, matmul_forms, rowwise):
    """No launch form of the row-wise kernels (norms, their fused forms and backward, dw's fold, RoPE,
    SiLU-mul, the KV-cache write, the head's trees), the matmul or attention leaves a 64-bit division or remainder in
    its PTX: a run-time divisor that LLVM cannot turn into multiplies, which sm_90 runs as a
    subroutine call a thread. One (``row // H`` on an int64 row) held the fused q/k norm + RoPE at
    0.79 TB/s until session 26 (11 of them in that form's PTX); the same kernel with int32 rows runs at
    2.9 TB/s."""
    assert len(rowwise) >= 12
    kernels = {**{f"rowwise {n}": r for n, r in rowwise.items()}, **{f"matmul {n}": r for n, r in matmul_forms.items()},
               **_forward_kernels(built),
               **{f"backward {c} {k}": r for c, ks in built["backward"].items() for k, r in ks.items()}}
    divides = {name: r["int64_divisions"] for name, r in kernels.items() if r["int64_divisions"]}
    assert not divides, f"64-bit divisions or remainders in the PTX: {divides}"


def test_head_trees_fuse_the_first_product(rowwise):
    """Every merge of the head's trees (``_tree_kernel`` at 2-256 stats, ``_shard_tree_kernel`` in the groups of
    the 8B head's shards) fuses ``sa * fa`` into its FMA and rounds ``sb * fb`` first, as ``_pair`` writes it.
    TP=1's fused shard tree, TP=N's per-rank trees and their combine are different kernels; their sums agree
    bitwise only if each merge rounds the same way. Left as ``sa * fa + sb * fb`` the compiler fused the second
    product in 2-5 merges of the 128- and 256-wide forms (session 36: the fused shard tree's sums differed from
    two ``_tree`` launches on the H200, and so did TP=2's entropy from TP=1's). A guard against rewriting the
    merge, not the proof (``rowwise_sass.merge_fma_sides`` can miss a form); the proof is the GPU run of
    ``test_shard_tree_is_the_two_trees`` and ``test_head_vocab_shards_equal_tp1``."""
    trees = {name: r["merge_fma_sides"] for name, r in rowwise.items() if name.startswith("head")}
    assert len(trees) >= 12 and all(sides.get("first") for sides in trees.values()), trees
    assert not {name: sides for name, sides in trees.items() if "second" in sides}


# The spill of each Triton statistics-kernel build at its default K slots (bytes; session 37's sm_90 builds, where
# 4 slots at 64-row tiles spilled what 3 had and measured 0.94x the forward's time at 1-16 rows, and 4 at 128-row
# tiles would have raised the logits-kept build's -- the vLLM class's sampling head -- from 128 to 200)
STATS_SPILL_CEILING = {"64-row tiles, plain": 0, "64-row tiles, logits kept": 8, "64-row tiles, entropy": 104,
                       "64-row tiles, probabilities kept": 8, "128-row tiles, plain": 0,
                       "128-row tiles, logits kept": 128, "128-row tiles, entropy": 96,
                       "128-row tiles, probabilities kept": 0}


def test_head_stats_triton_builds_within_their_spills(rowwise):
    """The head's Triton statistics kernel in every form ``_launch_stats`` gives it pointer loads (each tile height,
    plain, the logits or the probabilities kept, the entropy) spills no more than it did when its K slots were last
    measured, and keeps its wgmma pipeline asynchronous: a deeper pipeline (``STATS_STAGES``) or a kernel change
    that costs registers shows here before a device session (the same bits either way; only the speed moves)."""
    stats = {name.split(", ", 1)[1]: r for name, r in rowwise.items() if name.startswith("stats kernel (Triton)")}
    assert set(stats) == set(STATS_SPILL_CEILING), sorted(stats)
    over = {name: r["spill_stack_bytes"] for name, r in stats.items()
            if r["spill_stack_bytes"] > STATS_SPILL_CEILING[name]}
    assert not over, f"spills above the measured forms': {over}"
    assert not {name: r["wgmma_serialized"] for name, r in stats.items() if r["wgmma_serialized"]}


@pytest.fixture(scope="module")
def gluon() -> dict:
    return _sass("gluon_sass.py")


def test_head_stats_sm90_builds_unspilled_wgmma_pipeline(gluon):
    """The Gluon statistics kernel (``head_sm90``: the grid form, the 8B training head's default, and the
    ping-pong form, the default below K = 4096) for sm_90 in the forms ``_launch_stats`` sends it
    (probabilities kept or not, no entropy sum): its dots are m64n256k16 wgmmas (the Triton
    kernel's MMA shape, which its bits need), none serialized, nothing spilled, its shared memory one
    program's. (The entropy forms spill 264-344 bytes; ``_launch_stats`` keeps those on the Triton kernel.)"""
    from rlk_models.ops.triton import matmul_sm90

    forms = gluon["stats_sm90"]
    assert len(forms) >= 8
    used = {name: r for name, r in forms.items() if "entropy=False" in name}
    bad = {name: {k: r[k] for k in ("wgmma", "mma_sync", "wgmma_serialized", "spill_stack_bytes", "shared_bytes")}
           for name, r in used.items()
           if r["wgmma"] != ["m64n256k16"] or r["mma_sync"] or r["wgmma_serialized"] or r["spill_stack_bytes"]
           or r["shared_bytes"] > 227 * 1024 or not matmul_sm90.fits_sm(r["registers"], r["warps"])}
    assert not bad, bad
    assert not {n: r["int64_divisions"] for n, r in forms.items() if r["int64_divisions"]}


def test_matmul_sm90_builds_unspilled_wgmma_pipeline(gluon):
    """The matmul's Gluon K-group form (``matmul_sm90``, ``Launch.sm90``, the row-parallel default above 128
    rows) in every config, in 8 K-groups and (the plain layers' candidates, up to 128 x 256 tiles) in one, bias or
    not, bf16 or fp32 out, 64-wide K slots and (where two fit) 128-wide: wgmmas as wide as a consumer's columns
    (the tile's, or half of them in a 64-row tile; a wide consumer's two boxes, session 50), none serialized,
    nothing spilled, one program's shared memory;
    a 128-wide slot's dot twice the 64-wide one's k16 wgmmas (the same chain, hence the same bits)."""
    from rlk_models.ops.triton import matmul_sm90

    forms = {**gluon["mm_groups_sm90"], **{f"{name} plain": r for name, r in gluon["mm_plain_sm90"].items()}}
    assert len(forms) >= 20 and any(name.startswith("(64,") for name in forms)
    assert any(name.startswith("(128, 256,") for name in forms)

    def wgmmas(name: str) -> list[str]:  # a consumer's columns, or (``wide``) its two boxes' (192: 128 + 64)
        return sorted(f"m64n{n}k16" for n in matmul_sm90.boxes(*(int(v) for v in name[1:].split(",")[:2])) if n)

    assert wgmmas("(64, 256, 12, 4)") == ["m64n128k16"] and wgmmas("(192, 96, 12, 5)") == ["m64n32k16", "m64n64k16"]
    assert any(name.startswith("(192, 192,") for name in forms) and any(name.startswith("(128, 96,") for name in forms)
    bad = {name: {k: r[k] for k in ("wgmma", "mma_sync", "wgmma_serialized", "spill_stack_bytes", "shared_bytes")}
           for name, r in forms.items()
           if r["wgmma"] != wgmmas(name) or r["mma_sync"] or r["wgmma_serialized"]
           or r["spill_stack_bytes"] or r["shared_bytes"] > 227 * 1024 or r["int64_divisions"]}
    assert not bad, bad
    # and each launches: its warps (Triton pads them to whole warpgroups) at its registers fit an SM's register file
    assert not {name: (r["warps"], r["registers"]) for name, r in forms.items()
                if not matmul_sm90.fits_sm(r["registers"], r["warps"])}
    wide = {name: r for name, r in forms.items() if " block_k=128" in name}
    assert any(name.startswith("(128, 128,") for name in wide) and any(name.startswith("(64, 128,") for name in wide)
    assert not {name: (r["mma"], forms[name.replace(" block_k=128", "")]["mma"]) for name, r in wide.items()
                if r["mma"] != 2 * forms[name.replace(" block_k=128", "")]["mma"]}
