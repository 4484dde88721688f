"""The Triton kernels: natively on a CUDA GPU, else on CPU under ``TRITON_INTERPRET=1`` (set by
tests/conftest.py before anything imports triton's kernels).

What each device can promise decides what is asserted bitwise:

- Natively (CUDA) every bitwise check runs on random data: tile configs, split-K, a row alone vs
  in a batch, TP shards, paged vs training attention, the whole model -- the rounding order is
  what is under test.
- Under the interpreter ``tl.dot`` is NumPy's matmul on each block, and the summation order
  inside it is the host BLAS's choice, which depends on the block shape and the CPU
  (``OPENBLAS_CORETYPE``). So checks that compare *different block shapes or row positions
  through a dot* use inputs on which every order gives the same bits: small dyadic integers
  (every product and partial sum exact in fp32) for matmuls and the head; for attention, scores
  that differ by 0 or >= 128 (so every softmax weight is exactly 1 or 0) and integer values.
  They still catch wrong indexing, masking, block-table walks, group and fold logic. Checks of
  ops without a dot (RMSNorm, SiLU-mul, RoPE, embedding) and the accuracy checks (against
  float64 or the reference backend) use random data everywhere. The whole model cannot be made
  exact, so under the interpreter training vs paged runner is compared within fp32 rounding.

The interpreter has no bfloat16 arithmetic (triton-lang/triton#11584): it runs fp32 and fp16;
bf16, TMA and speed are checked on the H200 (``benchmarks/triton/``).
"""

from __future__ import annotations

import importlib
from contextlib import nullcontext

import pytest
import torch

triton = pytest.importorskip("triton")

from rlk_models.ops import get_backend  # noqa: E402

NATIVE = torch.cuda.is_available()
DEV = "cuda" if NATIVE else "cpu"
DTYPES = ["float32", "float16"] + (["bfloat16"] if NATIVE else [])
# fp32 accumulation and output rounding; natively an fp32 tl.dot is TF32 (10-bit mantissa products)
TOL = {"float32": 2e-3 if NATIVE else 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}

pytestmark = pytest.mark.skipif(not NATIVE and __import__("os").environ.get("TRITON_INTERPRET") != "1",
                                reason="needs CUDA or TRITON_INTERPRET=1 (tests/conftest.py sets it on CPU)")


def _mod(name: str):
    return importlib.import_module(f"rlk_models.ops.triton.{name}")


def bitwise_data(g: torch.Generator, *shape: int, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    """Operands for a bitwise check across block shapes (see the module docstring): random on the
    GPU, dyadic integers in [-3/4, 3/4] under the interpreter."""
    x = torch.randn(*shape, generator=g) * scale if NATIVE else torch.randint(-3, 4, shape, generator=g) / 4
    return x.to(dtype).to(DEV)


def rand(g: torch.Generator, *shape: int, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(DEV)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm())


# --- matmul ---------------------------------------------------------------------------------------

def launch_choices(mm, grouped: bool) -> list:
    """Every default launch of the K order, and each grouped form with every candidate config. (The tables'
    Gluon launches, ``Launch.sm90``, run on an sm_90 GPU only -- tests/gpu proves them; here the Triton form they
    fall back to stands in. So for their 128-wide K loads, ``Launch.block_k``: here the 64-wide form they run as.)"""
    kind = "groups" if grouped else "plain"
    out = {(mm.sm90_fallback(lc, kind) if lc.sm90 else lc)._replace(block_k=mm.BLOCK_K)
           for (k, *_), table in (*mm.LAUNCHES.items(), *mm.TUNED.items()) if k == kind for _, lc in table if lc}
    if grouped:
        out |= {mm.Launch(c, split=sp) for c in mm.CANDIDATE_CONFIGS[::3] for sp in (0, 1, mm.HALF)}
    else:
        out |= {mm.Launch(c, persistent=pe, swap=sw) for c in mm.CANDIDATE_CONFIGS[::3] for pe in (False, True)
                for sw in (False, True)}
    return sorted(out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [64, 72, 200, 1024])  # one K-tile; ragged tail; several; 8 canonical groups
@pytest.mark.parametrize("row_parallel", [False, True])
def test_matmul_launch_choices_and_rows_agree(dtype, k, row_parallel):
    mm = _mod("matmul")
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(k)
    x, w, b = bitwise_data(g, 37, k, dtype=dt), bitwise_data(g, 45, k, dtype=dt), bitwise_data(g, 45, dtype=dt)
    first = mm.matmul(x, w, b, row_parallel=row_parallel, tma=False)
    for lc in launch_choices(mm, row_parallel and mm.k_groups(k) > 1):
        assert torch.equal(mm.matmul(x, w, b, row_parallel=row_parallel, launch=lc, tma=False), first), lc
    for i in (0, 5, 36):
        assert torch.equal(mm.matmul(x[i:i + 1], w, b, row_parallel=row_parallel, tma=False)[0], first[i]), \
            f"row {i} alone"
        assert torch.equal(mm.matmul(x[i:i + 3], w, b, row_parallel=row_parallel, tma=False), first[i:i + 3]), \
            f"rows {i}.. in a batch of 3"


@pytest.mark.parametrize("row_parallel", [False, True])
def test_matmul_tma_kernel_is_the_pointer_kernel(row_parallel):
    """The TMA kernel (the GPU's path; it runs in the interpreter too, given 16-byte-aligned
    strides) in each launch form -- flat K loops and swap included -- equals the pointer kernel."""
    mm = _mod("matmul")
    g = torch.Generator().manual_seed(3)
    k = 1024  # 8 groups of 2 K-tiles
    x, w, b = (bitwise_data(g, 37, k, dtype=torch.bfloat16), bitwise_data(g, 48, k, dtype=torch.bfloat16),
               bitwise_data(g, 48, dtype=torch.bfloat16))
    first = mm.matmul(x, w, b, row_parallel=row_parallel, tma=False)
    forms = ([dict(), dict(flat=True), dict(split=1, flat=True), dict(split=mm.HALF), dict(split=mm.HALF, flat=True)]
             if row_parallel else [dict(), dict(flat=True), dict(persistent=False), dict(swap=True)])
    for f in forms:
        lc = mm.Launch((16, 32, 4, 3), **f)
        assert torch.equal(mm.matmul(x, w, b, row_parallel=row_parallel, launch=lc, tma=True), first), lc


@pytest.mark.skipif(NATIVE, reason="the refusals off the GPU; on it tests/gpu/test_triton_contract_8b.py's "
                    "test_matmul_wide_k_loads_give_the_64_wide_bits and wide_gluon_tiles tests run these launches")
def test_matmul_block_k_runs_on_the_gpu_only_and_is_refused_by_name_elsewhere(monkeypatch):
    """``Launch.block_k=128`` (one dot over two 64-wide K-tiles) gives the 64-wide bits on the GPU, where a dot is a
    chain of k16 MMAs (tests/gpu proves it); under the interpreter a dot is one numpy product, so a launch that asks
    for it is refused, naming why, and a table's default that carried it would run the contract's 64. The Gluon
    form's wide K slots (sm90) are refused by name where a K-group is not whole slots or one slot is all that fits,
    and run as its Triton fallback off an sm_90 GPU."""
    mm = _mod("matmul")
    g = torch.Generator().manual_seed(11)
    x, w = bitwise_data(g, 5, 512, dtype=torch.bfloat16), bitwise_data(g, 48, 512, dtype=torch.bfloat16)
    for tma in (False, True):
        with pytest.raises(ValueError, match="block_k=128 needs the TMA kernel on a GPU"):
            mm.matmul(x, w, launch=mm.Launch((16, 32, 4, 3), block_k=128), tma=tma)
    with pytest.raises(ValueError, match="block_k=96 needs a multiple of BLOCK_K"):
        mm.matmul(x, w, launch=mm.Launch((16, 32, 4, 3), block_k=96), tma=True)
    with pytest.raises(ValueError, match=r"block_k=128 needs K-groups of whole loads \(a group here is 64 long\)"):
        mm.matmul(x, w, row_parallel=True, launch=mm.Launch((16, 32, 4, 3), split=1, block_k=128), tma=True)
    # the Gluon form's wide K slots: whole loads a K-group, then (here, no sm_90 GPU) its usual refusal by name
    with pytest.raises(ValueError, match=r"block_k=128 needs K-groups of whole loads \(a group here is 64 long\)"):
        mm.matmul(x, w, row_parallel=True, launch=mm.Launch((128, 128, 12, 5), sm90=True, block_k=128))
    with pytest.raises(ValueError, match="block_k=96 needs a multiple of BLOCK_K"):
        mm.matmul(x, w, launch=mm.Launch((128, 128, 12, 5), sm90=True, block_k=96))
    with pytest.raises(ValueError, match="an sm90 launch"):
        mm.matmul(x, w, launch=mm.Launch((128, 128, 12, 5), sm90=True, block_k=128))
    # where one 128-wide slot is all that fits (128 x 256 tiles), its ring would wait on itself: refused by both
    with pytest.raises(ValueError, match=r"block_k=128 needs two K slots in shared memory"):
        mm.matmul(x, w, launch=mm.Launch((128, 256, 12, 3), sm90=True, block_k=128))
    with pytest.raises(ValueError, match="fit one slot in shared memory; the ring needs two"):
        _mod("matmul_sm90").launch(x, w, torch.empty(5, 48, dtype=x.dtype), None, 1, 1, 128, 256, 3, 128)
    want = mm.matmul(x, w, tma=True)
    for lc in (mm.Launch((16, 32, 4, 3), swap=True, block_k=128), mm.Launch((128, 128, 12, 5), sm90=True, block_k=128)):
        monkeypatch.setattr(mm, "launch_for", lambda *a, lc=lc: lc)  # a table's default: the 64-wide bits
        assert torch.equal(mm.matmul(x, w, tma=True), want), lc


def test_matmul_accumulate_is_out_plus_the_product():
    """``accumulate=True`` gives the bits of ``out + mm(...)`` in fp32 -- the head backward's dh
    over vocab chunks -- in both kernels and launch forms, at a ragged M, and refuses what it does
    not cover (no out, bf16 out, K-groups, bias)."""
    mm = _mod("matmul")
    g = torch.Generator().manual_seed(5)
    # dlogits [T, c] and the chunk of the weight [c, K]
    dl, w = bitwise_data(g, 37, 96, dtype=torch.bfloat16), bitwise_data(g, 96, 64, dtype=torch.bfloat16)
    dh0 = bitwise_data(g, 37, 64, dtype=torch.float32)
    want = dh0 + mm.mm(dl, w, b_kn=True, out_dtype=torch.float32, tma=False)
    for tma in (False, True):
        for f in (dict(), dict(persistent=False), dict(flat=True)):
            got = dh0.clone()
            out = mm.mm(dl, w, b_kn=True, out=got, accumulate=True, launch=mm.Launch((16, 32, 4, 3), **f), tma=tma)
            assert out is got and torch.equal(got, want), (tma, f)
    got = dh0.clone()
    mm.mm(dl, w, b_kn=True, out=got, accumulate=True)  # the shape's default launch
    assert torch.equal(got, want)
    for bad in (dict(), dict(out=dh0.bfloat16()), dict(out=dh0.clone(), groups=8),
                dict(out=dh0.clone(), bias=torch.zeros(64))):
        with pytest.raises(ValueError, match="accumulate"):
            mm.mm(dl, w, b_kn=True, accumulate=True, **bad)


def test_matmul_constexprs_follow_the_launch_not_m():
    """What becomes a compiled kernel's constexprs (tile loop stride included) depends on the
    launch alone, never on M: on the GPU each distinct set is a JIT compile, and a set that
    followed M compiled a kernel for nearly every step size an engine met (session 12). Over M
    in one bucket and across buckets, plain and K-grouped, both kernels."""
    import inspect

    import triton.language as tl

    mm = _mod("matmul")
    g = torch.Generator().manual_seed(9)
    seen, real = [], {}
    # on an sm_90 GPU the TMA launches of these sizes are the Gluon form's kernel
    for kern in (mm._mm_kernel, mm._mm_tma_kernel, _mod("matmul_sm90")._mm_groups_ws):
        fn = getattr(kern, "fn", kern)
        params = list(inspect.signature(fn).parameters.values())
        const = [i for i, p in enumerate(params) if p.annotation in (tl.constexpr, "tl.constexpr", "gl.constexpr")]
        real[kern] = kern.run

        def spy(*args, kern=kern, const=const, **kw):
            fixed = tuple(args[i] for i in const if i < len(args))
            seen.append((fixed, tuple(sorted((k, v) for k, v in kw.items() if k.isupper()))))
            return real[kern](*args, **kw)

        kern.run = spy
    try:
        for k, rp in ((64, False), (512, True)):
            w = bitwise_data(g, 256, k, dtype=torch.bfloat16)
            for tma in (False, True):
                for ms in ((300, 333, 460), (1100, 1500, 1999)):  # one launch bucket each
                    seen.clear()
                    for m in ms:
                        mm.matmul(bitwise_data(g, m, k, dtype=torch.bfloat16), w, row_parallel=rp, tma=tma)
                    assert len(seen) == len(ms) and len(set(seen)) == 1, (k, tma, ms, set(seen))
    finally:
        for kern, run in real.items():
            kern.run = run


def test_matmul_k_order_is_the_layers():
    """Row-parallel K-groups and the plain order are different sums: a product whose plain fp32
    sum rounds differently from the grouped one tells them apart (the kind really reaches the
    kernel)."""
    mm = _mod("matmul")
    k = 1024
    x = torch.zeros(1, k, device=DEV)
    w = torch.zeros(1, k, device=DEV)
    # K-tiles 2 and 3 form group 1: plain ((2^24 + 1) + 1) rounds to 2^24, grouped 2^24 + (1 + 1) does not
    x[0, 0], x[0, 128], x[0, 192] = 2.0 ** 24, 1.0, 1.0
    w[0, [0, 128, 192]] = 1.0
    assert mm.matmul(x, w, tma=False).item() == 2.0 ** 24
    assert mm.matmul(x, w, row_parallel=True, tma=False).item() == 2.0 ** 24 + 2


@pytest.mark.parametrize("split", [0, 1, 4])  # fused; split-K per group; per half
def test_matmul_row_parallel_adds_two_halves(split):
    """Contract version 3: groups 0-3 and 4-7 are folded separately and the halves added. With
    2^24 in group 0 and a 1 in each of groups 4 and 5, a fold of all 8 in order drops both ones
    ((2^24 + 1) rounds to 2^24 twice); the halves give 2^24 + (1 + 1) -- in both launch forms."""
    mm = _mod("matmul")
    k = 1024  # groups of 128
    x = torch.zeros(1, k, device=DEV)
    w = torch.zeros(1, k, device=DEV)
    x[0, 0], x[0, 4 * 128], x[0, 5 * 128 + 64] = 2.0 ** 24, 1.0, 1.0
    w[0, [0, 4 * 128, 5 * 128 + 64]] = 1.0
    lc = mm.Launch((16, 32, 4, 2), split=split)
    assert mm.matmul(x, w, row_parallel=True, launch=lc, tma=False).item() == 2.0 ** 24 + 2


@pytest.mark.parametrize("n", [45, 1024, 1100])  # one block narrower than 1024; one whole; a whole and a ragged one
@pytest.mark.parametrize("count,run", [(2, 1), (8, 4)])  # halves; the 8 groups' runs of 4
def test_fold_partials_folds_each_rows_columns_with_their_bias(n, count, run):
    """``fold_partials`` (the split launches' second kernel, a program a row's block of columns): each output the
    partials in runs of ``run`` folded from zero, the runs' sums added in order, + its column's bias -- the same
    sums written out in torch (fp32, elementwise, in that order), for every row and column block. Out in fp32 (the
    interpreter's conversion to bf16 does not round to nearest as the GPU's does: the sums, not the rounding, are
    under test here)."""
    mm = _mod("matmul")
    g = torch.Generator().manual_seed(n + count)
    rows = 3
    parts = torch.randn(count, rows, n, generator=g).to(DEV)
    bias = torch.randn(n, generator=g).bfloat16().to(DEV)
    acc = torch.zeros(rows, n, device=DEV)
    for r in range(count // run):
        part = torch.zeros(rows, n, device=DEV)
        for i in range(r * run, (r + 1) * run):
            part = part + parts[i]
        acc = acc + part
    for b in (None, bias):
        out = torch.empty(rows, n, device=DEV)
        want = acc if b is None else acc + b.float()
        assert torch.equal(mm.fold_partials(parts, out, b, count, run), want), f"bias={b is not None}"


def test_matmul_two_groups_split_by_halves_runs_fused():
    """A split by halves needs whole halves of 4 groups; asked of 2 groups (what
    benchmarks/triton/matmul_halves_probe.py compares against) it runs the fused form, the same
    bits, instead of a split into zero pieces."""
    mm = _mod("matmul")
    g = torch.Generator().manual_seed(21)
    x, w = bitwise_data(g, 33, 256), bitwise_data(g, 48, 256)
    fused = mm.mm(x, w, groups=2, launch=mm.Launch((16, 32, 4, 2)), tma=False)
    assert torch.equal(mm.mm(x, w, groups=2, launch=mm.Launch((16, 32, 4, 2), split=mm.HALF), tma=False), fused)
    assert torch.equal(fused, mm.mm(x, w, groups=2, launch=mm.Launch((16, 32, 4, 2), split=1), tma=False))


@pytest.mark.parametrize("k", [200, 1000])  # groups of 64 (the last 8 wide, then empty); 128 (the last 104)
def test_matmul_ragged_groups_fold_each_groups_plain_product(k):
    """K not a multiple of groups x 64 (a backward's split of a long plain K, e.g. dh over the vocab): each group
    takes ceil(K-tiles / groups) K-tiles (the last fewer or none), its plain product folded by the halves, in
    every form (fused, split per group, per half; pointer and, natively, TMA loads)."""
    mm = _mod("matmul")
    g = torch.Generator().manual_seed(k)
    x, w = bitwise_data(g, 37, k), bitwise_data(g, 48, k)  # rows of 16-byte multiples, for TMA
    kg = -(-k // (8 * 64)) * 64
    parts = [mm.mm(x[:, a:a + kg], w[:, a:a + kg], out_dtype=torch.float32, tma=False) if a < k
             else torch.zeros(37, 48, device=DEV) for a in range(0, 8 * kg, kg)]
    halves = [(((0 + parts[i]) + parts[i + 1]) + parts[i + 2]) + parts[i + 3] for i in (0, 4)]
    want = (0 + halves[0]) + halves[1]  # the kernels' folds, each from zero
    for tma in ((False, True) if NATIVE else (False,)):
        for split in (0, 1, mm.HALF):
            got = mm.mm(x, w, groups=8, launch=mm.Launch((16, 32, 4, 2), split=split), tma=tma)
            assert torch.equal(got, want), (tma, split)


def test_matmul_halves_probe_is_two_groups():
    """benchmarks/triton/matmul_halves_probe.py's kernel (h0 stashed, one accumulator) computes
    ``mm(..., groups=2)``: ragged M and N, two tile shapes."""
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[3] / "benchmarks"
    sys.path[:0] = [str(bench / "triton"), str(bench)]
    try:
        probe = importlib.import_module("matmul_halves_probe")
    finally:
        del sys.path[:2]
    mm = _mod("matmul")
    g = torch.Generator().manual_seed(22)
    x, w = bitwise_data(g, 200, 512), bitwise_data(g, 384 if NATIVE else 192, 512)
    if NATIVE:
        x, w = x.bfloat16(), w.bfloat16()
    want = mm.mm(x, w, groups=2)
    for config in ((64, 128, 4, 2), (128, 256, 8, 3)) if NATIVE else ((64, 128, 4, 2),):
        assert torch.equal(probe.halves_stash(x, w, config), want), config


def test_matmul_sm90_launch_refuses_what_it_cannot_compute():
    """The Gluon fused form (``Launch.sm90``) serves a forward product on an sm_90 GPU only; asked for anything
    else it says so instead of computing something else. Its tiles: 128 rows (a consumer's 64 each) up to 128
    columns, or 64 rows split by columns up to 256, in one K-group (plain K) twice the columns; 192 rows (three
    consumers) up to 64 columns, 128 in one K-group; a consumer's columns a power of two, or, in one K-group in 128-
    and 192-row tiles, 96 or 192 (a 64- and a 32-wide box, or 128 and 64: ``wide``), and in K-groups 128 x 96
    (``GROUPED_WIDE``). Its K slots are cut to what
    fits beside the output's staging tiles, and a form where two do not fit (192 x 192 with fp32 out) is refused."""
    from rlk_models.ops.triton import matmul_sm90
    from rlk_models.ops.triton.matmul import Launch, mm

    a, b = torch.zeros(16, 4096, device=DEV), torch.zeros(64, 4096, device=DEV)
    for kw in (dict(groups=8), dict(groups=1), dict(groups=8, b_kn=True)):
        for tile in ((128, 128), (64, 256)):
            with pytest.raises(ValueError, match="sm90 launch"):
                mm(a, b.t().contiguous() if kw.get("b_kn") else b, launch=Launch((*tile, 12, 5), sm90=True), **kw)
    served = {(bm, bn) for bm in (32, 64, 128, 192, 256) for bn in (24, 32, 64, 96, 128, 192, 256, 512)
              if matmul_sm90.serves_tile(bm, bn)}
    assert served == {(64, 32), (64, 64), (64, 96), (64, 128), (64, 256), (128, 32), (128, 64), (128, 96), (128, 128),
                      (192, 32), (192, 64)}
    plain = {(bm, bn) for bm in (32, 64, 128, 192, 256) for bn in (24, 32, 64, 96, 128, 192, 256, 512)
             if matmul_sm90.serves_tile(bm, bn, plain=True)}
    assert plain == served | {(64, 512), (128, 256), (192, 128), (128, 96), (128, 192), (192, 96), (192, 192)}
    tiles = ((128, 192), (192, 96), (64, 96), (64, 192), (64, 384), (128, 128))
    assert [matmul_sm90.wide(*tile) for tile in tiles] == [True, True, True, False, False, False]
    assert [matmul_sm90.boxes(*tile) for tile in ((128, 192), (192, 96), (64, 96), (64, 256), (192, 64))] == [
        (128, 64), (64, 32), (32, 16), (128, 0), (64, 0)]
    assert matmul_sm90.ring_fits(192, 192, 64, 3, 2, 2) and not matmul_sm90.ring_fits(192, 192, 64, 3, 2, 4)
    assert [matmul_sm90.consumers(bm) for bm in (64, 128, 192)] == [2, 2, 3]
    # registers at launch (the H200, session 33: 16 warps at 152 a thread refused, "Hardware limit: 384" threads)
    assert not matmul_sm90.fits_sm(152, 16) and matmul_sm90.fits_sm(152, 12) and not matmul_sm90.fits_sm(152, 13)
    assert [matmul_sm90.fits_sm(*reg_warps) for reg_warps in ((168, 12), (128, 16), (136, 16), (255, 8))] == [
        True, True, False, True]
    consumer, launch_regs = matmul_sm90.REGS[3]  # 13 warps launch as 16; then three consumer warpgroups + the loader's
    assert matmul_sm90.fits_sm(launch_regs, 16) and 3 * consumer + 24 <= 512
    with pytest.raises(ValueError, match="no form for 128 x 256"):
        matmul_sm90.launch(a, b, torch.empty(16, 64), None, 8, 4, 128, 256, 5, 64)
    with pytest.raises(ValueError, match="no form for 128 x 512"):
        matmul_sm90.launch(a, b, torch.empty(16, 64), None, 1, 1, 128, 512, 3, 64)
    # K slots (bf16 operands, 64-wide K steps) beside bf16 / fp32 staging tiles: a table's configs keep theirs
    assert [matmul_sm90.slots(bm, bn, 64, nb, 2, out) for bm, bn, nb in ((128, 128, 5), (64, 128, 6), (128, 256, 3),
                                                                         (64, 256, 4), (192, 64, 6), (192, 128, 4))
            for out in (2, 4)] == [5, 5, 6, 6, 3, 2, 4, 4, 6, 5, 4, 3]
    # the wide forms (192 columns): 192 x 192 with fp32 out keeps one slot, so mm refuses it (runs the fallback)
    assert [matmul_sm90.slots(bm, bn, 64, nb, 2, out) for bm, bn, nb in ((128, 192, 4), (192, 192, 3))
            for out in (2, 4)] == [4, 3, 3, 1]
    for lc in (Launch((64, 128, 12, 6), sm90=True, tail=True), Launch((128, 128, 8, 5), tail=True)):
        with pytest.raises(ValueError, match="tail"):
            mm(a, b, groups=8, launch=lc)


def test_matmul_wave_rows():
    """``Launch.tail``: the rows in whole waves of 128 x 128 tiles, the rest in 64 x 128 ones where those fit one
    wave (132 SMs, the H200)."""
    from rlk_models.ops.triton.matmul import wave_rows

    cfg = (128, 128, 12, 5)
    # o / down at 8B, N = 4096: 32 tiles a row of tiles, 4 rows of tiles (512 rows) a wave
    assert [wave_rows(m, 4096, cfg, 132) for m in (768, 520, 1100, 200, 1024, 16384, 1000)] == \
        [512, 512, 1024, 0, 1024, 16384, 1000]  # 1000: 488 rows are 256 half tiles, two waves
    # o at 1.7B, N = 2048: 1024 rows a wave; 1100 leaves 76 rows (32 half tiles)
    assert [wave_rows(m, 2048, cfg, 132) for m in (1100, 768, 2048)] == [1024, 768, 2048]
    assert wave_rows(300, 40000, cfg, 132) == 300  # a row of tiles wider than the GPU: no whole wave


def test_matmul_grids():
    """``grids``: the kernels a forward product launches on an H200 (132 SMs), with their tiles and programs -- the
    split, persistent and tail decisions ``mm`` makes, and the grid ``mm`` hands the Triton kernel and the fold."""
    from rlk_models.ops.triton import matmul as mmod
    from rlk_models.ops.triton.matmul import Grid, Launch, grids

    # o 8B at 768 rows (its table's Gluon launch with its tail): 512 rows in 128 tiles, 256 in 128 half tiles
    assert grids(768, 4096, 4096, 8) == [Grid(512, "gluon", (128, 128), 128, 128),
                                         Grid(256, "gluon", (64, 128), 128, 128)]
    # at 384 rows no whole wave of 128-row tiles, and 192 half tiles would be more than one: 96 tiles, 96 programs
    assert grids(384, 4096, 4096, 8) == [Grid(384, "gluon", (128, 128), 96, 96)]
    # the 192-column Gluon tiles in TUNED (session 50): one wave of 128 tiles at qkv 8B's 768 and 512 rows and
    # gate_up 8B's 192
    assert grids(768, 6144, 4096, 1) == [Grid(768, "gluon", (192, 192), 128, 128)]
    assert grids(512, 6144, 4096, 1) == [Grid(512, "gluon", (128, 192), 128, 128)]
    assert grids(192, 24576, 4096, 1) == [Grid(192, "gluon", (192, 192), 128, 128)]
    # the 128 x 96 tiles in K-groups in TUNED (session 54): one wave at o/down 1.7B's 768 rows (6 x 22 tiles, the last
    # column of tiles 32 of 96 wide) and down 8B's 384 (3 x 43)
    assert grids(768, 2048, 2048, 8) == grids(768, 2048, 6144, 8) == [Grid(768, "gluon", (128, 96), 132, 132)]
    assert grids(384, 4096, 12288, 8) == [Grid(384, "gluon", (128, 96), 129, 129)]
    # o 8B at 64 rows (TUNED: 64 x 64 tiles by halves, flat): 64 tiles x 2 parts, then the fold
    assert grids(64, 4096, 4096, 8) == [Grid(64, "triton", (64, 64), 128, 128), Grid(64, "fold", (1, 1024), 256, 256)]
    # qkv 8B at 16 rows (swap: the weight's rows on the tile's 64-row side): 96 tiles of 16 tokens x 64 weight rows
    assert grids(16, 6144, 4096, 1) == [Grid(16, "triton", (16, 64), 96, 96)]
    # a persistent launch past one wave: one program an SM; the Gluon form that cannot serve falls back
    assert grids(8192, 4096, 4096, 1, Launch((128, 256, 8, 3))) == [Grid(8192, "triton", (128, 256), 1024, 132)]
    assert grids(384, 4096, 4096, 8, Launch((192, 128, 12, 4), sm90=True)) == \
        [Grid(384, "triton", (128, 128), 96, 96)]  # 192 x 128 tiles in K-groups: no form; the 128-row fallback

    class Recorder:  # the grids mm hands its kernels (instead of launching them)
        def __init__(self, seen):
            self.seen = seen

        def __getitem__(self, grid):
            return lambda *args, **kw: self.seen.append(grid)

    a, b = torch.zeros(64, 4096), torch.zeros(4096, 4096)
    seen: list = []
    lc = Launch((64, 64, 4, 4), split=mmod.HALF, persistent=False, flat=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mmod, "_mm_kernel", Recorder(seen))
        mp.setattr(mmod, "_fold_kernel", Recorder(seen))
        mp.setattr(mmod, "num_sms", lambda device: 132)  # an H200's
        mmod.mm(a, b, groups=8, launch=lc, tma=False)
        mmod.mm(torch.zeros(300, 4096), b, groups=1, launch=Launch((64, 128, 4, 4)), tma=False)
    # 64 tiles x 2 parts, the fold's rows x column blocks; 160 tiles on 132 programs
    assert seen == [(64, 2), (64, 4), (132,)]
    assert [(g.programs, g.tiles) for g in grids(64, 4096, 4096, 8, lc)] == [(128, 128), (256, 256)]
    assert grids(300, 4096, 4096, 1, Launch((64, 128, 4, 4))) == [Grid(300, "triton", (64, 128), 160, 132)]


def test_matmul_table_sm90_launch_falls_back_where_it_cannot_serve():
    """Above 128 rows the grouped-K table names the Gluon form; where it cannot serve the product (here:
    no sm_90 GPU, or fp32 operands, or ``tma=False``) the default runs the Triton form of its tile's height
    (``SM90_FALLBACKS``), with its bits."""
    from rlk_models.ops.triton.matmul import SM90_FALLBACKS, k_groups, launch_for, mm

    g = torch.Generator().manual_seed(11)
    x, w = bitwise_data(g, 300, 1024, dtype=torch.bfloat16), bitwise_data(g, 48, 1024, dtype=torch.bfloat16)
    for rows, tile in ((300, 128), (200, 64)):
        assert launch_for(rows, 48, k_groups(1024), 1024).sm90
        assert launch_for(rows, 48, k_groups(1024), 1024).config[0] == tile
        ref = SM90_FALLBACKS["groups", tile]
        want = mm(x[:rows], w, groups=8, launch=ref, tma=False)
        assert torch.equal(mm(x[:rows], w, groups=8, tma=False), want)
        xf, wf = x[:rows].float(), w.float()
        assert torch.equal(mm(xf, wf, groups=8, tma=False), mm(xf, wf, groups=8, launch=ref, tma=False))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [64, 72, 200, 1024])
def test_matmul_close_to_float64(dtype, k):
    mm = _mod("matmul")
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(k)
    x, w, b = rand(g, 37, k, dtype=dt), rand(g, 45, k, dtype=dt, scale=0.1), rand(g, 45, dtype=dt)
    ref = x.double() @ w.double().T + b.double()
    for rp in (False, True):
        for lc in launch_choices(mm, rp and mm.k_groups(k) > 1)[::4]:
            assert rel_err(mm.matmul(x, w, b, row_parallel=rp, launch=lc, tma=False), ref) < TOL[dtype], lc
    assert mm.matmul(x, w, out_dtype=torch.float32, tma=False).dtype == torch.float32


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_tensor_parallel_shards_equal_tp1(dtype):
    tri, dt = get_backend("triton"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(3)
    k = 1024  # 8 groups of 2 K-tiles
    x, w, b = bitwise_data(g, 19, k, dtype=dt), bitwise_data(g, 33, k, dtype=dt), bitwise_data(g, 33, dtype=dt)
    full = tri.linear(x, w, b, row_parallel=True)
    for tp in (2, 4, 8):
        sl = [slice(i * k // tp, (i + 1) * k // tp) for i in range(tp)]
        parts = torch.stack([tri.shard_partial(x[:, s], w[:, s], tp) for s in sl])
        assert torch.equal(tri.combine_partials(parts, b, dt), full), f"TP={tp}"
        if tp == 2:  # what vLLM does at TP=2: all-reduce the one partial per rank, in either order
            assert parts.shape[1] == 1
            for summed in (parts[0] + parts[1], parts[1] + parts[0]):
                assert torch.equal(tri.combine_partials(summed[None], b, dt), full), "TP=2 all-reduced"
    with pytest.raises(ValueError, match="4 partials"):
        tri.combine_partials(parts[:4], b, dt)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_backward_close_to_float64_and_deterministic(dtype):
    tri, dt = get_backend("triton"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(3)
    x, w, b = rand(g, 19, 1024, dtype=dt), rand(g, 33, 1024, dtype=dt, scale=0.1), rand(g, 33, dtype=dt)
    dy = rand(g, 19, 33, dtype=dt)
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    got = torch.autograd.grad(tri.linear(xr, wr, br), [xr, wr, br], dy)
    again = torch.autograd.grad(tri.linear(xr, wr, br), [xr, wr, br], dy)
    want = torch.autograd.grad(torch.nn.functional.linear(xr.double(), wr.double(), br.double()), [xr, wr, br],
                               dy.double())
    for a, a2, c in zip(got, again, want):
        assert torch.equal(a, a2), "backward not deterministic"
        assert rel_err(a, c) < 10 * TOL[dtype]


# --- row-wise ops (no dot) -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op,shape", [("rms_norm", (37, 80)), ("rms_norm", (9, 3, 80)), ("silu_mul", (37, 150))])
def test_rowwise_ops_row_invariant_and_close_to_reference(dtype, op, shape):
    ref, dt = get_backend("reference"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(1)
    w = rand(g, 80, dtype=dt)
    x = rand(g, *shape, dtype=dt, scale=2.0)
    gy = rand(g, *x.shape[:-1], 80 if op == "rms_norm" else shape[-1] // 2, dtype=dt)

    def fwd(backend, x, w):
        return backend.rms_norm(x, w, 1e-6) if op == "rms_norm" else backend.silu_mul(x)

    def run(backend, x, w):  # output and gradients (x, and w for RMSNorm)
        x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = fwd(backend, x, w)
        return y, torch.autograd.grad(y, [x, w] if op == "rms_norm" else [x], gy.to(y.device))

    tri = get_backend("triton")
    y, grads = run(tri, x, w)
    for i in (0, 4, shape[0] - 1):
        assert torch.equal(fwd(tri, x[i:i + 1], w)[0], y[i]), f"row {i} alone"
    assert all(torch.equal(a, b) for a, b in zip(grads, run(tri, x, w)[1])), "backward not deterministic"
    y_ref, grads_ref = run(ref, x.cpu(), w.cpu())
    assert rel_err(y, y_ref) < TOL[dtype]
    for a, b in zip(grads, grads_ref):
        assert rel_err(a, b) < 10 * TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keep_act", [False, True])
def test_silu_mul_linear_is_the_two_ops(dtype, keep_act):
    """The MLP's fused SiLU-mul + down projection: the two ops' output and gradients bit for bit,
    the product rebuilt by the SiLU-mul backward kernel (``WITH_ACT``) or kept."""
    tri, dt = get_backend("triton"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(9)
    gu, w, b = bitwise_data(g, 37, 2 * 1536, dtype=dt, scale=3), bitwise_data(g, 96, 1536, dtype=dt, scale=0.1), \
        bitwise_data(g, 96, dtype=dt)
    dy = bitwise_data(g, 37, 96, dtype=dt)

    def run(fused):
        xs = [t.clone().requires_grad_() for t in (gu, w, b)]
        y = (tri.silu_mul_linear(*xs, keep_act=keep_act) if fused
             else tri.linear(tri.silu_mul(xs[0]), xs[1], xs[2], row_parallel=True))
        return y, *torch.autograd.grad(y, xs, dy)

    for a, c in zip(run(True), run(False), strict=True):
        assert torch.equal(a, c)
    dgu, act = _mod("silu_mul").silu_mul_backward(gu, dy[:, :1].expand(37, 1536).contiguous(), True)
    assert torch.equal(act, tri.silu_mul(gu))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_reads_heads_in_place(dtype):
    """Qwen3's q/k norm: per-head RMSNorm of [T, H, D] views into the qkv projection's rows is read
    in place (no copy) and gives the bits and gradients of the same heads made contiguous."""
    tri, dt = get_backend("triton"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(8)
    qkv, w = rand(g, 11, (4 + 2 + 2) * 64, dtype=dt), rand(g, 64, dtype=dt)
    gy = rand(g, 11, 2, 64, dtype=dt)
    for view in (qkv[:, :256].view(11, 4, 64), qkv[:, 256:384].view(11, 2, 64)):
        assert view.stride(0) == 512
        y = tri.rms_norm(view, w, 1e-6)
        assert torch.equal(y, tri.rms_norm(view.contiguous(), w, 1e-6))
    base, w1 = qkv.clone().requires_grad_(), w.clone().requires_grad_()
    k_view = base[:, 256:384].view(11, 2, 64)
    dk_view, dw_view = torch.autograd.grad(tri.rms_norm(k_view, w1, 1e-6), (base, w1), gy)  # backward in place too
    k_copy, w2 = qkv[:, 256:384].view(11, 2, 64).contiguous().requires_grad_(), w.clone().requires_grad_()
    dk_copy, dw_copy = torch.autograd.grad(tri.rms_norm(k_copy, w2, 1e-6), (k_copy, w2), gy)
    assert torch.equal(dk_view[:, 256:384].view(11, 2, 64), dk_copy) and not dk_view[:, :256].any()
    assert torch.equal(dw_view, dw_copy)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [80, 2048, 4096])  # BLOCK_D 128 / 2048 (4 warps) / 4096 (8 warps)
def test_add_rms_norm_is_the_add_then_the_norm(dtype, d):
    """The decoder's fused residual add + norm: exactly (rms_norm(x + r), x + r) -- the same
    reduction code on the same tile, natively the check that matters -- and the two ops' gradients."""
    tri, dt = get_backend("triton"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(6)
    x, r, w = rand(g, 37, d, dtype=dt), rand(g, 37, d, dtype=dt, scale=4.0), rand(g, d, dtype=dt)
    gy, gs = rand(g, 37, d, dtype=dt), rand(g, 37, d, dtype=dt)

    def run(fused):
        xl, rl, wl = (t.clone().requires_grad_() for t in (x, r, w))
        y, s = tri.add_rms_norm(xl, rl, wl, 1e-6) if fused else (tri.rms_norm(xl + rl, wl, 1e-6), xl + rl)
        return (y, s, *torch.autograd.grad((y, s), (xl, rl, wl), (gy, gs)))

    for name, a, b in zip(("y", "s", "dx", "dr", "dw"), run(True), run(False), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [64, 128, 80])  # head dims; 80: BLOCK_D 128 with a masked tail, half 40 of 64
def test_rms_norm_rope_is_the_norm_then_the_rope(dtype, d):
    """Qwen3's q/k norm + RoPE in one kernel (heads read in place inside the qkv rows): exactly
    the norm kernel and then the rope kernel -- the same code on the stored, rounded row, natively
    the check that matters (FMA contraction is the compiler's) -- and the two ops' gradients."""
    from rlk_models.ops import rope_table

    tri, dt = get_backend("triton"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(7)
    t, h = 37, 4
    qkv, w, gy = rand(g, t, (h + 2) * d, dtype=dt, scale=3.0), rand(g, d, dtype=dt), rand(g, t, h, d, dtype=dt)
    table = rope_table(d, 4096, {"rope_type": "default", "rope_theta": 1e6}).to(DEV)
    pos = torch.randint(0, 4096, (t,), generator=g).to(DEV)

    def run(fused):
        ql, wl = qkv.clone().requires_grad_(), w.clone().requires_grad_()
        x = ql[:, :h * d].view(t, h, d)
        y = tri.rms_norm_rope(x, wl, 1e-6, pos, table) if fused else tri.rope(tri.rms_norm(x, wl, 1e-6), pos, table)
        return (y, *torch.autograd.grad(y, (ql, wl), gy))

    for name, a, b in zip(("y", "dqkv", "dw"), run(True), run(False), strict=True):
        assert torch.equal(a, b), name
    y = run(True)[0]
    assert all(torch.equal(tri.rms_norm_rope(qkv[i:i + 1, :h * d].view(1, h, d), w, 1e-6, pos[i:i + 1], table)[0],
                           y[i]) for i in (0, 17, 36)), "a row alone"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [64, 128, 80])
def test_qk_norm_rope_in_one_launch_is_the_two_ops(dtype, d):
    """Both of Qwen3's q/k norms + RoPE in one launch (k's heads after q's in the qkv rows, each
    head's row with its tensor's weight): exactly ``rms_norm_rope`` of q and of k, forward and
    backward (the gradients reach the qkv rows through both views), a row alone as in the batch."""
    from rlk_models.ops import rope_table

    tri, dt, rn = get_backend("triton"), getattr(torch, dtype), _mod("rms_norm")
    g = torch.Generator().manual_seed(11)
    t, hq, hk = 37, 4, 2
    qkv = rand(g, t, (hq + 2 * hk) * d, dtype=dt, scale=3.0)
    wq, wk = rand(g, d, dtype=dt), rand(g, d, dtype=dt)
    gq, gk = rand(g, t, hq, d, dtype=dt), rand(g, t, hk, d, dtype=dt)
    table = rope_table(d, 4096, {"rope_type": "default", "rope_theta": 1e6}).to(DEV)
    pos = torch.randint(0, 4096, (t,), generator=g).to(DEV)
    launches = []

    def run(fused):
        ql, wql, wkl = (v.clone().requires_grad_() for v in (qkv, wq, wk))
        q, k = ql[:, :hq * d].view(t, hq, d), ql[:, hq * d:(hq + hk) * d].view(t, hk, d)
        if fused:
            yq, yk = tri.qk_norm_rope(q, k, wql, wkl, 1e-6, pos, table)
        else:
            yq, yk = tri.rms_norm_rope(q, wql, 1e-6, pos, table), tri.rms_norm_rope(k, wkl, 1e-6, pos, table)
        return (yq, yk, *torch.autograd.grad((yq, yk), (ql, wql, wkl), (gq, gk)))

    real = rn._rms_fwd.run
    rn._rms_fwd.run = lambda *a, **kw: (launches.append(kw["TWO"]), real(*a, **kw))[1]
    try:
        fused = run(True)
    finally:
        rn._rms_fwd.run = real
    assert launches == [True], launches  # one forward launch for both
    for name, a, b in zip(("yq", "yk", "dqkv", "dwq", "dwk"), fused, run(False), strict=True):
        assert torch.equal(a, b), name
    for i in (0, 17, 36):
        q1, k1 = qkv[i:i + 1, :hq * d].view(1, hq, d), qkv[i:i + 1, hq * d:(hq + hk) * d].view(1, hk, d)
        yq1, yk1 = tri.qk_norm_rope(q1, k1, wq, wk, 1e-6, pos[i:i + 1], table)
        assert torch.equal(yq1[0], fused[0][i]) and torch.equal(yk1[0], fused[1][i]), f"row {i} alone"
    # not adjacent (k copied out): the two launches, the same bits
    q, k = qkv[:, :hq * d].view(t, hq, d), qkv[:, hq * d:(hq + hk) * d].reshape(t, hk, d).clone()
    yq, yk = tri.qk_norm_rope(q, k, wq, wk, 1e-6, pos, table)
    assert torch.equal(yq, fused[0].detach()) and torch.equal(yk, fused[1].detach())


@pytest.mark.parametrize("dtype", DTYPES)
def test_qk_norm_rope_writes_its_gradients_into_the_qkv_gradient(dtype):
    """The decoder's qkv split (``split_columns``) + q/k norm + RoPE: the backward writes dq and dk at
    their columns of one qkv-wide buffer and the split's backward copies only dv into it (the
    buffer is the gradient: no concatenation) -- bitwise torch.split's concatenated gradient."""
    from rlk_models.ops import rope_table
    from rlk_models.ops.autograd import split_columns

    tri, dt = get_backend("triton"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(3)
    t, hq, hk, d = 37, 4, 2, 64
    qkv = rand(g, t, (hq + 2 * hk) * d, dtype=dt, scale=3.0)
    wq, wk = rand(g, d, dtype=dt), rand(g, d, dtype=dt)
    gq, gk, gv = rand(g, t, hq, d, dtype=dt), rand(g, t, hk, d, dtype=dt), rand(g, t, hk * d, dtype=dt)
    table = rope_table(d, 4096, {"rope_type": "default", "rope_theta": 1e6}).to(DEV)
    pos = torch.randint(0, 4096, (t,), generator=g).to(DEV)

    def grad(split):
        x = qkv.clone().requires_grad_()
        q, k, v = split(x)
        yq, yk = tri.qk_norm_rope(q.view(t, hq, d), k.view(t, hk, d), wq, wk, 1e-6, pos, table)
        return torch.autograd.grad((yq, yk, v), x, (gq, gk, gv))[0]

    sizes = [hq * d, hk * d, hk * d]
    got = grad(lambda x: split_columns(x, sizes))
    assert getattr(got, "_rlk_free_columns", "not the buffer") is None  # the q/k backward's buffer, filled
    assert torch.equal(got, grad(lambda x: x.split(sizes, -1)))


@pytest.mark.parametrize("hooks", [False, True])  # saved-tensor hooks on: the decoder's rebuild_saved
@pytest.mark.parametrize("qk_norm", [True, False])  # Qwen3 (q/k norm + RoPE), Llama (RoPE alone)
def test_attention_and_qk_norm_share_one_qkv_gradient_buffer(qk_norm, hooks, monkeypatch):
    """The decoder's chain -- qkv split, q/k norm + RoPE (or RoPE), attention -- backward: attention's
    dK/dV kernel stores dv at v's columns of one qkv-wide buffer, the q/k norm's backward puts dq and
    dk beside it (Llama's dq and dk are copied in), and the split's backward returns that buffer: one
    buffer in the whole backward, no concatenation, bitwise torch.split's gradient. Also under
    saved-tensor hooks (the decoder's ``rebuild_saved`` in training), whose unpacked tensors have no
    view base: session 29 found the 8B step concatenating because the backward asked them for it."""
    from rlk_models.ops import autograd, rope_table
    from rlk_models.ops.autograd import split_columns

    tri, dt = get_backend("triton"), torch.float32
    g = torch.Generator().manual_seed(5)
    t, hq, hk, d = 37, 4, 2, 16
    qkv = rand(g, t, (hq + 2 * hk) * d, dtype=dt)
    wq, wk = rand(g, d, dtype=dt), rand(g, d, dtype=dt)
    table = rope_table(d, 4096, {"rope_type": "default", "rope_theta": 1e6}).to(DEV)
    pos = torch.cat([torch.arange(20), torch.arange(17)]).to(DEV)
    cu = torch.tensor([0, 20, 37], device=DEV)
    do = rand(g, t, hq, d, dtype=dt)
    made, bases = [], []
    real, join = autograd.column_buffer, autograd._join_columns
    monkeypatch.setattr(autograd, "column_buffer", lambda *a: made.append(real(*a)) or made[-1])
    monkeypatch.setattr(autograd, "_join_columns", lambda gs, *a: bases.append([x._base for x in gs]) or join(gs, *a))

    def grad(split):
        x = qkv.clone().requires_grad_()
        with torch.autograd.graph.saved_tensors_hooks(lambda s: s, lambda s: s) if hooks else nullcontext():
            q, k, v = (y.view(t, -1, d) for y in split(x))
            if qk_norm:
                q, k = tri.qk_norm_rope(q, k, wq, wk, 1e-6, pos, table)
            else:
                q, k = tri.rope(q, pos, table), tri.rope(k, pos, table)
            o = tri.varlen_attention(q, k, v, cu, d ** -0.5)
        return torch.autograd.grad(o, x, do)[0]

    sizes = [hq * d, hk * d, hk * d]
    got = grad(lambda x: split_columns(x, sizes))
    assert len(made) == 1 and got is made[0], "one gradient buffer, returned as the gradient"
    # the blocks' gradients that reached the split already in the buffer: all three, or Llama's dv
    assert [b is got for b in bases[0]] == ([True] * 3 if qk_norm else [False, False, True]), "a block was copied"
    assert getattr(got, "_rlk_free_columns", "not the buffer") is None
    assert torch.equal(got, grad(lambda x: x.split(sizes, -1)))


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_training_model_backward_fills_one_qkv_gradient_buffer_a_layer(family, monkeypatch):
    """The training model (activations rebuilt, the default: saved-tensor hooks on) through
    backward: every layer's qkv split gets back the one buffer its producers wrote into -- dq, dk
    and dv already placed (Qwen3), dv (Llama) -- and concatenates nothing."""
    from rlk_models.families import FAMILIES
    from rlk_models.ops import autograd

    spec = FAMILIES[family]
    torch.manual_seed(0)
    cfg = spec.config_cls(**dict(spec.tiny, vocab_size=128), rlk_backend="triton")
    with torch.device(DEV):
        model = spec.training_cls(cfg)
    assert model.config.rlk_rebuild_activations
    placed, join = [], autograd._join_columns

    def recorded(grads, sizes, shape):
        out = join(grads, sizes, shape)
        placed.append([g._base is out for g in grads])
        return out
    monkeypatch.setattr(autograd, "_join_columns", recorded)
    model.train()
    ids = torch.randint(0, 128, (37,), device=DEV)
    model.packed_token_logprobs(ids, torch.tensor([0, 20, 37], device=DEV)).sum().backward()
    want = [True] * 3 if family == "qwen3" else [False, False, True]
    assert placed == [want] * cfg.num_hidden_layers


def test_rms_norm_refuses_rows_past_int32():
    """The forward's row, token and head indices are int32: 2**31 rows (tokens x heads) or more
    is refused with an error naming the limit, before anything is allocated or launched."""
    rn = _mod("rms_norm")
    x, w = torch.zeros(1, 8, device=DEV), torch.ones(8, device=DEV)
    with pytest.raises(ValueError, match=r"2147483648 rows .* int32 row index"):
        rn._forward(x, w, 1e-6, 2**31, 1, 8)
    assert rn._forward(x, w, 1e-6, 1, 1, 8)[0].shape == (1, 8)  # the same call with one row runs


@pytest.mark.parametrize("n,d", [(1, 32), (37, 80), (513, 128)])  # the unroll's tail; columns masked; several rounds
def test_fold_chunks_adds_in_chunk_order(n, d):
    """dw's fold of the chunk partials (unrolled, loads ahead of the adds): bitwise the fp32 adds
    c = 0, 1, ..., n - 1 one after another; partials from 1e-8 to 1e8 make any other order differ."""
    rn = _mod("rms_norm")
    g = torch.Generator().manual_seed(n)
    parts = torch.randn(n, d, generator=g) * torch.logspace(-8, 8, n)[torch.randperm(n, generator=g)][:, None]
    out = torch.empty(d, device=DEV)
    rn._fold_chunks[(triton.cdiv(d, rn.FOLD_COLS),)](parts.to(DEV), out, n, d, BLOCK_C=rn.FOLD_COLS,
                                                     AHEAD=rn.FOLD_AHEAD, num_warps=1)
    want, backwards = torch.zeros(d), torch.zeros(d)
    for c in range(n):
        want, backwards = want + parts[c], backwards + parts[n - 1 - c]
    assert torch.equal(out.cpu(), want)
    assert n < 3 or not torch.equal(want, backwards)  # the data tells the orders apart


@pytest.mark.parametrize("d", [80, 4096])  # one chunk of rows; several chunks (the dw partials' fold)
def test_rms_norm_backward_chunks_close_to_float64(d):
    """The fused backward: dx and dw against float64 autograd with several row chunks, and dx alone
    (weight without gradient: no dw pass) bitwise the same dx."""
    rn = _mod("rms_norm")
    g = torch.Generator().manual_seed(d)
    m = 2 * rn._bwd_tile(d)[1] + 5
    x, w, gy = rand(g, m, d, scale=2.0), rand(g, d), rand(g, m, d)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    dx, dw = torch.autograd.grad(rn.rms_norm(xr, wr, 1e-6), [xr, wr], gy)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    y64 = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w64
    dx64, dw64 = torch.autograd.grad(y64, [x64, w64], gy.double())
    assert rel_err(dx, dx64) < 1e-5 and rel_err(dw, dw64) < 1e-5
    xo = x.clone().requires_grad_()
    (dx_only,) = torch.autograd.grad(rn.rms_norm(xo, w, 1e-6), [xo], gy)
    assert torch.equal(dx_only, dx)


def test_rms_norm_backward_tilings_close_to_float64():
    """The backward tilings the sweep times (``bwd_tile_candidates``, every third): each gives dx and
    dw close to float64, at a row count that leaves a ragged last step and chunk."""
    rn = _mod("rms_norm")
    g = torch.Generator().manual_seed(1)
    m, d = 67, 256
    x, w, gy = rand(g, m, d, scale=2.0), rand(g, d), rand(g, m, d)
    rstd = torch.rsqrt(x.pow(2).mean(-1) + 1e-6)
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    dx64, dw64 = torch.autograd.grad(x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w64,
                                     [x64, w64], gy.double())
    for tile in rn.bwd_tile_candidates(d)[::3]:
        dx, dw = rn._backward(gy, x, w, rstd, True, tile)
        assert rel_err(dx, dx64) < 1e-5 and rel_err(dw, dw64) < 1e-5, tile


def test_rope_and_embedding_match_reference():
    ref, tri = get_backend("reference"), get_backend("triton")
    from rlk_models.ops import rope_table

    g = torch.Generator().manual_seed(5)
    table = rope_table(32, 64, {"rope_type": "default", "rope_theta": 1e4})
    x = torch.randn(9, 3, 32, generator=g).requires_grad_()
    pos = torch.randint(0, 64, (9,), generator=g)
    xd, posd, tabled = x.detach().to(DEV).requires_grad_(), pos.to(DEV), table.to(DEV)
    y, yr = tri.rope(xd, posd, tabled), ref.rope(x, pos, table)
    assert float((y.detach().cpu() - yr.detach()).abs().max()) < 1e-6
    assert torch.equal(tri.rope(xd[2:3], posd[2:3], tabled)[0], y[2]), "row alone"
    dy = torch.randn(9, 3, 32, generator=g)
    assert float((torch.autograd.grad(y, xd, dy.to(DEV))[0].cpu() - torch.autograd.grad(yr, x, dy)[0]).abs().max()) \
        < 1e-6
    w = torch.randn(50, 20, generator=g).requires_grad_()
    wd = w.detach().to(DEV).requires_grad_()
    ge = torch.randn(30, 20, generator=g)
    for ids in (torch.randint(0, 50, (30,), generator=g), torch.randint(0, 3, (30,), generator=g) * 24 + 1):
        assert torch.equal(torch.autograd.grad(tri.embedding(ids.to(DEV), wd), wd, ge.to(DEV))[0].cpu(),
                           torch.autograd.grad(ref.embedding(ids, w), w, ge)[0]), ("embedding backward order", ids)


# --- attention -----------------------------------------------------------------------------------

LENS, HQ, HKV, D = [5, 70, 1, 33], 4, 2, 16


def attention_bitwise_qkv(g: torch.Generator, dt: torch.dtype):
    """q, k, v [T, H, D] for a bitwise check across block shapes. Natively random. Under the
    interpreter: kv head 0 has the same key for every token (uniform attention: each visible V
    counts, so any wrong key position, block or mask shows); kv head 1 has keys e or 0 at random
    and queries 0 or 8e (scores 0 or 128: a query attends uniformly to its window or to exactly
    the matching keys, so a wrong K, Q row or block shows). Every softmax weight is exactly 0 or
    1 and V is integer, so every sum is exact."""
    t = sum(LENS)
    if NATIVE:
        return rand(g, t, HQ, D, dtype=dt), rand(g, t, HKV, D, dtype=dt), rand(g, t, HKV, D, dtype=dt)
    e = torch.randint(0, 2, (HKV, D), generator=g) * 2 - 1  # +-1 per kv head
    k = e[None].repeat(t, 1, 1) * 4
    k[:, 1] *= torch.randint(0, 2, (t, 1), generator=g)
    q = e.repeat_interleave(HQ // HKV, 0)[None].repeat(t, 1, 1) * 8 * torch.randint(0, 2, (t, HQ, 1), generator=g)
    v = torch.randint(-8, 9, (t, HKV, D), generator=g)
    return (x.to(dt).to(DEV) for x in (q, k, v))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [16, 128])
def test_paged_attention_equals_training_per_token(dtype, block_size):
    from rlk_models.testing.paged_steps import paged_steps, random_block_table

    att, dt = _mod("attention"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(4)
    q, k, v = attention_bitwise_qkv(g, dt)
    cu = torch.tensor([0] + torch.tensor(LENS).cumsum(0).tolist(), device=DEV)
    o = att.varlen_attention(q, k, v, cu, D ** -0.5)
    assert torch.equal(att.varlen_attention(q, k, v, cu, D ** -0.5, config=(128, 4, 1)), o), "training BLOCK_M"
    bt, n_blocks = random_block_table(LENS, block_size, g, device=DEV)
    cache = torch.full((n_blocks, HKV, block_size, 2 * D), float("nan"), dtype=dt, device=DEV)
    out = torch.full_like(q, float("nan"))
    chunks = iter([3, 1, 1, 40, 1, 7, 1, 1, 64, 2] * 20)
    for idx, rows, seq_lens, qsl in paged_steps(cache, k, v, cu, LENS, bt, lambda n: next(chunks)):
        out[idx] = att.paged_attention(q[idx], cache, rows, seq_lens, qsl, D ** -0.5)  # decodes and chunks mixed
    assert torch.equal(out, o), f"paged (block size {block_size}) != training"


@pytest.mark.parametrize("pad_tokens,pad_reqs", [(0, 3), (5, 0), (37, 9)])
def test_paged_attention_padded_like_a_captured_graph(pad_tokens, pad_reqs):
    """A vLLM CUDA graph captured for T tokens and R requests replays every step that fits it,
    decodes and prefill chunks mixed: the step's tokens are followed by padding tokens and its
    requests by empty ones (query_start_loc repeating its last value, seq_len 0). The launch for
    the padded sizes gives the real rows the unpadded launch's bits and leaves the padding rows
    as they were -- the grid depends on nothing but T and R."""
    from rlk_models.testing.paged_steps import paged_steps, random_block_table

    att = _mod("attention")
    g = torch.Generator().manual_seed(7)
    q, k, v = attention_bitwise_qkv(g, torch.float32)
    cu = torch.tensor([0] + torch.tensor(LENS).cumsum(0).tolist(), device=DEV)
    bt, n_blocks = random_block_table(LENS, 16, g, device=DEV)
    cache = torch.full((n_blocks, HKV, 16, 2 * D), float("nan"), dtype=torch.float32, device=DEV)
    chunks = iter([5, 1, 70, 1, 2, 1, 33] * 40)
    steps = 0
    for idx, rows, seq_lens, qsl in paged_steps(cache, k, v, cu, LENS, bt, lambda n: next(chunks)):
        want = att.paged_attention(q[idx], cache, rows, seq_lens, qsl, D ** -0.5)
        t = idx.numel()
        qp = torch.cat([q[idx], torch.full((pad_tokens, HQ, D), 3.0, device=DEV)])
        rows_p = torch.cat([rows, torch.zeros(pad_reqs, rows.shape[1], dtype=rows.dtype, device=DEV)])
        lens_p = torch.cat([seq_lens, torch.zeros(pad_reqs, dtype=seq_lens.dtype, device=DEV)])
        qsl_p = torch.cat([qsl, qsl[-1:].repeat(pad_reqs)])
        out = torch.full_like(qp, -7.0)
        att.paged_attention(qp, cache, rows_p, lens_p, qsl_p, D ** -0.5, out=out)
        assert torch.equal(out[:t], want), f"step {steps}: real rows differ under padding"
        assert bool((out[t:] == -7.0).all()), f"step {steps}: a padding row was written"
        steps += 1
    assert steps > 3


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_close_to_reference_and_backward_deterministic(dtype):
    from rlk_models.testing.paged_steps import paged_steps, random_block_table

    ref, att, dt = get_backend("reference"), _mod("attention"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(4)
    t = sum(LENS)
    q, k, v = rand(g, t, HQ, D, dtype=dt), rand(g, t, HKV, D, dtype=dt), rand(g, t, HKV, D, dtype=dt)
    cu = torch.tensor([0] + torch.tensor(LENS).cumsum(0).tolist(), device=DEV)
    o = att.varlen_attention(q, k, v, cu, D ** -0.5)
    qc, kc, vc = (x.cpu().float() for x in (q, k, v))
    cuc = cu.cpu()
    o_ref = ref.varlen_attention(qc, kc, vc, cuc, D ** -0.5)
    assert float((o.cpu().double() - o_ref.double()).abs().max()) < 10 * TOL[dtype]
    # the reference's own paged path is bitwise its training path (it is BLAS-free)
    bt, n_blocks = random_block_table(LENS, 16, g)
    cache = torch.full((n_blocks, HKV, 16, 2 * D), float("nan"))
    for idx, rows, seq_lens, qsl in paged_steps(cache, kc, vc, cuc, LENS, bt, lambda n: 3):
        assert torch.equal(ref.paged_attention(qc[idx], cache, rows, seq_lens, qsl, D ** -0.5), o_ref[idx])
    qr, kr, vr = (x.clone().requires_grad_() for x in (q, k, v))
    do = rand(g, t, HQ, D, dtype=dt)
    got = torch.autograd.grad(att.varlen_attention(qr, kr, vr, cu, D ** -0.5), [qr, kr, vr], do)
    again = torch.autograd.grad(att.varlen_attention(qr, kr, vr, cu, D ** -0.5), [qr, kr, vr], do)
    qf, kf, vf = (x.detach().cpu().float().requires_grad_() for x in (q, k, v))
    want = torch.autograd.grad(ref.varlen_attention(qf, kf, vf, cuc, D ** -0.5), [qf, kf, vf], do.cpu().float())
    for a, a2, c in zip(got, again, want):
        assert torch.equal(a, a2), "attention backward not deterministic"
        assert rel_err(a, c) < 10 * TOL[dtype]


@pytest.mark.parametrize("bwd", range(len(_mod("attention").BWD_CANDIDATES)))
def test_attention_backward_candidates_close_to_float64_and_deterministic(bwd):
    """Every backward launch the H200 sweep may pick (dK/dV: keys on the dots' M side, query tiles
    of 32-128; dQ: query tiles of 64-128): gradients within fp32 rounding of float64 on ragged
    sequences (masked diagonal tiles, unmasked interior ones, a key block past the last query
    tile), and identical run to run."""
    att = _mod("attention")
    cfg = att.BWD_CANDIDATES[bwd]
    g = torch.Generator().manual_seed(9)
    lens = [1, 33, 64, 130, 200]
    t = sum(lens)
    q, k, v = rand(g, t, HQ, D), rand(g, t, HKV, D), rand(g, t, HKV, D)
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), device=DEV)
    do = rand(g, t, HQ, D)

    def grads(q, k, v, fn):
        q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
        return torch.autograd.grad(fn(q, k, v), [q, k, v], do.to(q.device, q.dtype))

    ours = lambda q, k, v: att.varlen_attention(q, k, v, cu, D ** -0.5, bwd_config=cfg)  # noqa: E731

    def f64(q, k, v):
        outs = []
        for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
            qq = q[a:b].transpose(0, 1)
            kk, vv = (x[a:b].repeat_interleave(HQ // HKV, 1).transpose(0, 1) for x in (k, v))
            outs.append(torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=True,
                                                                         scale=D ** -0.5).transpose(0, 1))
        return torch.cat(outs)

    got = grads(q, k, v, ours)
    assert all(torch.equal(a, b) for a, b in zip(got, grads(q, k, v, ours))), f"{cfg}: backward run to run"
    want = grads(q.cpu().double(), k.cpu().double(), v.cpu().double(), f64)
    for name, a, b in zip("qkv", got, want):
        assert rel_err(a, b) < (2e-3 if NATIVE else 1e-5), (cfg, name, rel_err(a, b))


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_backward_kept_ds_is_the_recomputed_one(dtype, monkeypatch):
    """dQ from the dS that the dK/dV kernel stored is bitwise dQ recomputed from q, k, v and dO
    (the path past ``DS_BYTES``, its own ``DQ_RECOMPUTE_CONFIG``), and dK, dV do not change:
    ragged sequences, GQA, every backward candidate (tile shapes and so the padding of dS's rows),
    TMA and pointer loads. Under the interpreter a dot's sums follow the block shape (module
    docstring), so there it checks the candidates whose dK/dV and dQ tiles agree, the recomputing
    kernel running the same tiles."""
    att, dt = _mod("attention"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(13)
    lens = [1, 33, 64, 130, 200, 70]
    t = sum(lens)
    q, k, v = rand(g, t, HQ, D, dtype=dt), rand(g, t, HKV, D, dtype=dt), rand(g, t, HKV, D, dtype=dt)
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), device=DEV)
    do = rand(g, t, HQ, D, dtype=dt)
    kept = [c for c in att.BWD_CANDIDATES if c[1][2] == 4]  # dQ from kept dS runs at 4 warps only (keeps_ds)
    same_tiles = [c for c in kept if c[0][:2] == c[1][:2]]
    assert att.BWD_CONFIG in kept and same_tiles
    assert not att.keeps_ds(1, 1, 1, 2, 8)
    launches = []

    class Spy:  # counts the launches of dQ's kept-dS kernel
        def __getitem__(self, grid):
            launches.append(grid)
            return kernel[grid]
    kernel = att._bwd_dq_ds
    monkeypatch.setattr(att, "_bwd_dq_ds", Spy())
    for cfg in kept if NATIVE else same_tiles:
        if not NATIVE:
            monkeypatch.setattr(att, "DQ_RECOMPUTE_CONFIG", cfg[1])
        pad = max(cfg[0][:2] + cfg[1][:2])
        rows, width = t + len(lens) * pad, -(-200 // pad) * pad  # each sequence padded; max_len 200 rounded up
        need = HQ * rows * width * q.element_size()
        for tma in ((False, True) if NATIVE else (False,)):
            runs = {}
            for name, cap in (("kept", need), ("recomputed", need - 1)):
                monkeypatch.setattr(att, "DS_BYTES", cap)
                assert att.keeps_ds(rows, width, HQ, q.element_size(), cfg[1][2]) == (name == "kept")
                qr, kr, vr = (x.clone().requires_grad_() for x in (q, k, v))
                o = att.varlen_attention(qr, kr, vr, cu, D ** -0.5, bwd_config=cfg, tma=tma)
                launches.clear()
                runs[name] = torch.autograd.grad(o, [qr, kr, vr], do)
                assert len(launches) == (name == "kept"), (cfg, name, launches)
            for grad, a, b in zip(("dq", "dk", "dv"), runs["kept"], runs["recomputed"]):
                assert torch.equal(a, b), (cfg, tma, grad)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_tma_loads_are_the_pointer_loads(dtype):
    """The GPU's default loads q, k, v and dO by TMA over the whole packed batch, so a tile that
    runs past its sequence holds the next sequence's rows (zeros only past the batch) where the
    pointer loads give zeros: the output, the saved lse and all three gradients are the same
    bits anyway (ragged sequences, v read in place at the qkv rows' stride, two forward tiles)."""
    att, dt = _mod("attention"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(12)
    lens = [1, 33, 64, 130, 70]
    t = sum(lens)
    qkv = rand(g, t, (HQ + 2 * HKV) * D, dtype=dt)
    q, k, v = (x.reshape(t, -1, D) for x in qkv.split([HQ * D, HKV * D, HKV * D], dim=-1))
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), device=DEV)
    do = rand(g, t, HQ, D, dtype=dt)
    for config in (att.TRAIN_CONFIG, (64, 4, 2)):
        outs = []
        for tma in (False, True):
            qr, kr, vr = q.contiguous().requires_grad_(), k.contiguous().requires_grad_(), v.detach().requires_grad_()
            o = att.varlen_attention(qr, kr, vr, cu, D ** -0.5, config=config, tma=tma)
            outs.append((o, o.grad_fn.saved_tensors[4], *torch.autograd.grad(o, [qr, kr, vr], do)))
        for name, a, b in zip(("o", "lse", "dq", "dk", "dv"), *outs):
            assert torch.equal(a, b), (config, name)


def test_attention_reads_v_in_place():
    """v given as a slice of a qkv row buffer (as the model passes it) is read at its token stride:
    the output and all three gradients equal those of a contiguous v, bit for bit."""
    att = _mod("attention")
    g = torch.Generator().manual_seed(8)
    t = sum(LENS)
    qkv = rand(g, t, (HQ + 2 * HKV) * D, dtype=torch.float16)
    q, k, v = (x.reshape(t, -1, D) for x in qkv.split([HQ * D, HKV * D, HKV * D], dim=-1))
    assert not v.is_contiguous()
    cu = torch.tensor([0] + torch.tensor(LENS).cumsum(0).tolist(), device=DEV)
    do = rand(g, t, HQ, D, dtype=torch.float16)
    outs = []
    for vv in (v, v.contiguous()):
        qr, kr, vr = q.contiguous().requires_grad_(), k.contiguous().requires_grad_(), vv.detach().requires_grad_()
        o = att.varlen_attention(qr, kr, vr, cu, D ** -0.5)
        assert o.grad_fn.saved_tensors[2].data_ptr() == vr.data_ptr(), "v was copied"
        outs.append((o, *torch.autograd.grad(o, [qr, kr, vr], do)))
    for a, b in zip(*outs):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_write_kv_equals_reference_and_skips_padding(dtype):
    from rlk_models.ops.paged import write_kv as write_kv_ref

    kv_kernel, dt = _mod("kv_cache"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(6)
    k, v = rand(g, 12, HKV, D, dtype=dt), rand(g, 12, HKV, D, dtype=dt)  # 12 rows, the last 2 padding
    slots = torch.randperm(40, generator=g)[:10]
    slots[[2, 7]] = -1                                                     # padding slots inside the step
    cache = torch.full((5, HKV, 8, 2 * D), float("nan"), dtype=dt, device=DEV)
    want = cache.cpu().clone()
    kv_kernel.write_kv(cache, k, v, slots.to(DEV))
    write_kv_ref(want, k.cpu(), v.cpu(), slots)
    assert torch.equal(cache.cpu().isnan(), want.isnan()), "written slots differ"
    assert torch.equal(cache.cpu().nan_to_num(), want.nan_to_num()), "written values differ"
    view = cache.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)     # vLLM's other physical layout
    view.fill_(float("nan"))
    kv_kernel.write_kv(view, k, v, slots.to(DEV))
    assert torch.equal(view.cpu().nan_to_num(), want.nan_to_num()), "strided cache view"


def test_write_kv_refuses_a_cache_past_int32_slots():
    """The kernel divides slots as int32: a cache of 2**31 slots or more is refused on the host (from
    its shape; no device value is read), naming the cache and the limit. A stride-0 view stands in."""
    kv_kernel = _mod("kv_cache")
    cache = torch.zeros(1, HKV, 1, 2 * D, device=DEV).expand(2**22, HKV, 512, 2 * D)  # 2**31 slots
    k = torch.zeros(1, HKV, D, device=DEV)
    with pytest.raises(ValueError, match=r"2147483648 slots.*int32"):
        kv_kernel.write_kv(cache, k, k, torch.zeros(1, dtype=torch.int64, device=DEV))


# --- log-prob head -------------------------------------------------------------------------------

@pytest.mark.parametrize("groups,tpg", [(8, 75), (4, 75), (8, 1), (2, 3), (1, 5)])
def test_shard_tree_is_the_two_trees(groups, tpg):
    """``_shard_tree`` (the tiles of each group, then the shard's groups, in one launch) gives ``_tree`` of the
    [T, groups, tpg] view then ``_tree`` of its result, bitwise: with the padding tiles and empty rows the stats
    kernel leaves (-inf, 0, 0), -0.0 maxima and sums, and ties; natively over 4,096 rows (session 36: a form
    whose merges rounded otherwise differed in ~9% of the 8B head's rows, so a handful of rows can miss it).
    Unwritten padding slots and a missing e read as the padding; the target's logit and the final (one-shard)
    form give ``combine_shards``'s bits over one rank."""
    head = _mod("logprob_head")
    g = torch.Generator().manual_seed(groups * 100 + tpg)
    t, n = 4096 if NATIVE else 64, groups * tpg
    m = torch.randn(t, n, generator=g) * 4
    s = torch.rand(t, n, generator=g) * 3 + 0.5
    e = torch.randn(t, n, generator=g)
    m[:, -min(n - 1, 6):], s[:, -min(n - 1, 6):], e[:, -min(n - 1, 6):] = float("-inf"), 0.0, 0.0  # padding tiles
    m[3], s[3], e[3] = float("-inf"), 0.0, 0.0  # an empty row (a shard past the vocab)
    m[4, 0], e[4, 0] = -0.0, -0.0
    m[5] = 1.5  # every tile's max tied
    m, s, e = (x.to(DEV).contiguous() for x in (m, s, e))
    want = head._tree(*head._tree(*(x.view(t, groups, tpg) for x in (m, s, e))))
    got = head._shard_tree(m, s, e, groups, tpg)
    for name, a, b in zip("mse", got, want):
        assert torch.equal(a, b) and torch.equal(a.signbit(), b.signbit()), name
    # the padding tiles left unwritten (garbage past n_real) and e absent: read as (-inf, 0, 0) and 0
    real = n - min(n - 1, 6)
    junk = [x.clone() for x in (m, s, e)]
    for x in junk:
        x[:, real:] = float("nan")
    got = head._shard_tree(junk[0], junk[1], junk[2], groups, tpg, real)
    for name, a, b in zip("mse", got, want):
        assert torch.equal(a, b) and torch.equal(a.signbit(), b.signbit()), f"{name}, unwritten padding"
    got = head._shard_tree(junk[0], junk[1], None, groups, tpg, real)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and not got[2].any(), "no e"
    # the target's logit: the stats kernel's where the target lies in the shard [start, start + v), else +0.0;
    # final: combine_shards over this one rank (lse, e/s, the target's sum), bitwise
    start, v = 1000, 700
    ids = torch.randint(-1, 3000, (t,), generator=g).to(DEV)
    ids[:3] = torch.tensor([start, start + v - 1, start + v], device=DEV)
    logit = torch.randn(t, generator=g).to(DEV)
    logit[1] = -0.0
    written = torch.where((ids >= start) & (ids < start + v), logit, torch.full_like(logit, float("nan")))
    got = head._shard_tree(m, s, e, groups, tpg, None, ids, written, start, v)
    tgt_want = torch.where((ids >= start) & (ids < start + v), logit, torch.zeros_like(logit))
    assert torch.equal(got[3], tgt_want) and torch.equal(got[3].signbit(), tgt_want.signbit()), "target"
    lse, _, mean_l = head._tree(want[0][:, None], want[1][:, None], want[2][:, None], final=True)
    fin = head._shard_tree(m, s, e, groups, tpg, None, ids, written, start, v, final=True)
    tsum = tgt_want[None].sum(0)
    for name, a, b in (("lse", fin[0], lse), ("mean", fin[2], mean_l), ("target", fin[3], tsum)):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32)), f"final {name}"  # the empty row: NaN mean


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab", [2100, pytest.param(151936, marks=pytest.mark.skipif(not NATIVE, reason="GPU"))])
def test_head_vocab_shards_equal_tp1(dtype, vocab):
    """The vocab-parallel head: each rank's ``shard_stats`` (the global targets, localized to its shard inside the
    stats kernel), ``combine_shards`` over the ranks in order: TP=1's log-probs, entropy and full log-probs,
    bitwise, at TP = 2, 4, 8 (a target in each rank's shard, in the last partial tile, and -1). Natively also at
    Qwen3's vocabulary over 512 rows: its 8 groups of 75 tiles take the trees' widest forms (128 stats)."""
    from rlk_models.ops.canonical import padded_vocab, vocab_shard

    tri, dt = get_backend("triton"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(5)
    t = 512 if vocab > 2100 else 40
    h = bitwise_data(g, t, 64, dtype=dt)
    w_pad = torch.zeros(padded_vocab(vocab), 64, dtype=dt, device=DEV)
    w_pad[:vocab] = bitwise_data(g, vocab, 64, dtype=dt, scale=0.3)
    targets = torch.randint(0, vocab, (t,), generator=g).to(DEV)
    targets[:4] = torch.tensor([vocab - 1, vocab - 50, 0, 1024], device=DEV)
    lp, ent = tri.logprob_head(h, w_pad[:vocab], targets, vocab, True)
    full = tri.full_logprobs(h, w_pad, vocab)
    for k in (2, 4, 8):
        stats = [tri.shard_stats(h, w_pad[a:b], (a, b), vocab, targets, with_entropy=True, keep_logits=True)
                 for a, b in (vocab_shard(vocab, r, k) for r in range(k))]
        m, s, e, tgt = (torch.stack([st[i] for st in stats]) for i in range(4))
        lse, mean_l, target = tri.combine_shards(m, s, e, tgt)
        full_k = torch.cat([st.logits for st in stats], -1) - lse[:, None]
        assert torch.equal(target - lse, lp) and torch.equal(lse - mean_l, ent), f"TP={k}"
        assert torch.equal(full_k[:, :vocab], full), f"TP={k}: full log-probs"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab", [7, 700, 2100])  # one tile; tiles in one group; tiles in several groups
def test_head_rows_invariant_and_close_to_float64(dtype, vocab):
    head, dt = _mod("logprob_head"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(2)
    t = 200 if NATIVE else 40  # natively > 128 rows: every bf16 tile config of the stats kernel is crossed
    tgt = torch.randint(0, vocab, (t,), generator=g).to(DEV)
    h, w = bitwise_data(g, t, 64, dtype=dt), bitwise_data(g, vocab + 5, 64, dtype=dt, scale=0.3)  # + padding rows
    lp = head.logprob_head_forward(h, w, tgt, vocab)
    for i in (0, 5, 36, t - 1):
        assert torch.equal(head.logprob_head_forward(h[i:i + 1], w, tgt[i:i + 1], vocab)[0], lp[i]), f"row {i}"
    shared = torch.full((t, vocab), float("nan"), device=DEV)  # HeadGraphs' one buffer for every size
    for n in [n for n in (3, 16, 37, 64, 65) if n <= t]:  # the vLLM side: a few sequences per step
        full = head.full_logprobs(h[:n], w, vocab)
        assert torch.equal(full.gather(1, tgt[:n, None])[:, 0], lp[:n]), f"full_logprobs of {n} rows != the head"
        # written into a given buffer (the stats kernel's logits there, subtracted in place): the same bits
        into = head.full_logprobs(h[:n], w, vocab, out=shared[:n])
        assert into.data_ptr() == shared.data_ptr() and torch.equal(into, full), f"full_logprobs(out=) of {n} rows"
    tgt = tgt[:37]
    h, w = rand(g, 37, 64, dtype=dt), rand(g, vocab + 5, 64, dtype=dt, scale=0.3)
    lp = head.logprob_head_forward(h, w, tgt, vocab)
    want = (h.double() @ w[:vocab].double().T).log_softmax(-1).gather(1, tgt[:, None])[:, 0]
    # natively an fp32 tl.dot is TF32 (10-bit mantissas): each logit (std ~2.4) errs by ~1e-3, and the
    # worst of 37 rows' log-probs reached 0.0118 on the H200 (session 6)
    atol = {"float32": 3e-2 if NATIVE else 1e-4, "float16": 1e-4, "bfloat16": 1e-3}[dtype]
    assert float((lp.double() - want).abs().max()) < atol, vocab
    if dt != torch.bfloat16:
        ref, _ = get_backend("reference").logprob_head(h.cpu(), w.cpu(), tgt.cpu(), vocab)
        assert float((lp.cpu() - ref).abs().max()) < atol, vocab


def test_head_backward_chunk_rule():
    head = _mod("logprob_head")
    assert head.bwd_chunk(2048, 151936) == head.BWD_CHUNK == 2048  # the long-standing chunk at large T
    assert head.bwd_chunk(1 << 20, 151936) == 2048                  # never narrower
    assert head.bwd_chunk(1024, 151936) == 4096 and head.bwd_chunk(128, 151936) == 32768
    assert head.bwd_chunk(1, 151936) == head.bwd_chunk(0, 151936) == 151936 // 2048 * 2048 + 2048  # one chunk
    for t in (1, 7, 100, 1000, 5000, 9000):
        c = head.bwd_chunk(t, 151936)
        assert c % 2048 == 0 and (t * c <= head.BWD_ELEMS or c == 2048), t


@pytest.mark.parametrize("dtype", ["float32", "float16"] + (["bfloat16"] if NATIVE else []))
@pytest.mark.parametrize("elems", [None, 40 * 2048])  # the T-sized chunk (one here); 2048-entry chunks (3)
def test_head_backward_close_to_float64_and_deterministic(dtype, elems, monkeypatch):
    """dh and dW of log p (and the entropy) against float64, in one chunk or in several with a
    ragged last one, and identical run to run."""
    head, dt = _mod("logprob_head"), getattr(torch, dtype)
    if elems:
        monkeypatch.setattr(head, "BWD_ELEMS", elems)
    g = torch.Generator().manual_seed(4)
    t, vocab = 40, 4500
    h, w = rand(g, t, 64, dtype=dt), rand(g, vocab + 5, 64, dtype=dt, scale=0.3)  # + padding rows
    tgt = torch.randint(0, vocab, (t,), generator=g).to(DEV)
    gl, ge = rand(g, t), rand(g, t)

    def grads(h, w, fn):
        h, w = h.clone().requires_grad_(), w.clone().requires_grad_()
        lp, ent = fn(h, w)
        return torch.autograd.grad((lp * gl.to(lp.dtype)).sum() + (ent * ge.to(ent.dtype)).sum(), [h, w])

    ours = lambda h, w: head.logprob_head(h, w, tgt, vocab, True, save_probs=False)  # noqa: E731

    def f64(h, w):
        lsm = (h @ w[:vocab].T).log_softmax(-1)
        return lsm.gather(1, tgt[:, None])[:, 0], -(lsm.exp() * lsm).sum(-1)

    dh, dw = grads(h, w, ours)
    assert all(torch.equal(a, b) for a, b in zip((dh, dw), grads(h, w, ours))), "backward run to run"
    dh64, dw64 = grads(h.double(), w.double(), f64)
    tol = {"float32": 2e-3 if NATIVE else 1e-5, "float16": 4e-3, "bfloat16": 1.6e-2}[dtype]
    assert rel_err(dh, dh64) < tol and rel_err(dw, dw64) < tol, (rel_err(dh, dh64), rel_err(dw, dw64))
    assert not dw[vocab:].any(), "padding rows of W get no gradient"


@pytest.mark.parametrize("cfg", _mod("logprob_head").DLOGITS_CANDIDATES)
def test_head_backward_dlogits_tiles_close_to_float64(cfg, monkeypatch):
    """Every dlogits tile the sweep times gives dh and dW within fp32 rounding of float64, with a
    ragged last row block and vocab chunk."""
    head = _mod("logprob_head")
    monkeypatch.setattr(head, "DLOGITS_CONFIG", cfg)
    g = torch.Generator().manual_seed(5)
    t, vocab = 150, 2500
    h, w, gl = rand(g, t, 64), rand(g, vocab, 64, scale=0.3), rand(g, t)
    tgt = torch.randint(0, vocab, (t,), generator=g).to(DEV)
    hr, wr = h.clone().requires_grad_(), w.clone().requires_grad_()
    dh, dw = torch.autograd.grad(head.logprob_head(hr, wr, tgt, vocab, save_probs=False)[0], [hr, wr], gl)
    h64, w64 = h.double().requires_grad_(), w.double().requires_grad_()
    lp = (h64 @ w64.T).log_softmax(-1).gather(1, tgt[:, None])[:, 0]
    dh64, dw64 = torch.autograd.grad(lp, [h64, w64], gl.double())
    tol = 2e-3 if NATIVE else 1e-5
    assert rel_err(dh, dh64) < tol and rel_err(dw, dw64) < tol, (cfg, rel_err(dh, dh64), rel_err(dw, dw64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab", [700, 4500])  # a ragged last tile; several groups
def test_head_backward_from_kept_probs(dtype, vocab):
    """The default training backward (``save_probs``: dl from the forward's tile probabilities, no
    logits recomputed): the forward's log-probs are the bits of a forward that keeps nothing; dh
    and dW are within rounding of float64 (and, to dl's extra rounding, of the recompute
    backward), identical run to run, and zero on W's padding rows. An entropy gradient takes
    the recompute path: its bits are the recompute backward's."""
    head, dt = _mod("logprob_head"), getattr(torch, dtype)
    g = torch.Generator().manual_seed(9)
    t = 150
    h, w = rand(g, t, 64, dtype=dt), rand(g, vocab + 5, 64, dtype=dt, scale=0.3)  # + padding rows
    tgt = torch.randint(0, vocab, (t,), generator=g).to(DEV)
    gl, ge = rand(g, t), rand(g, t)

    def run(save, g_ent=None):
        hr, wr = h.clone().requires_grad_(), w.clone().requires_grad_()
        lp, ent = head.logprob_head(hr, wr, tgt, vocab, True, save_probs=save)
        loss = (lp * gl).sum() + ((ent * g_ent).sum() if g_ent is not None else 0)
        return (lp.detach(), *torch.autograd.grad(loss, [hr, wr]))

    lp, dh, dw = run(True)
    assert torch.equal(lp, head.logprob_head_forward(h, w, tgt, vocab)), "keeping the probabilities moved a log-prob"
    assert all(torch.equal(a, b) for a, b in zip((lp, dh, dw), run(True))), "backward run to run"
    assert not dw[vocab:].any(), "padding rows of W get no gradient"
    h64, w64 = h.double().requires_grad_(), w.double().requires_grad_()
    lp64 = (h64 @ w64[:vocab].T).log_softmax(-1).gather(1, tgt[:, None])[:, 0]
    dh64, dw64 = torch.autograd.grad(lp64, [h64, w64], gl.double())
    tol = {"float32": 2e-3 if NATIVE else 1e-5, "float16": 4e-3, "bfloat16": 1.6e-2}[dtype]
    assert rel_err(dh, dh64) < tol and rel_err(dw, dw64) < tol, (rel_err(dh, dh64), rel_err(dw, dw64))
    _, dh_r, dw_r = run(False)
    assert rel_err(dh, dh_r) < tol and rel_err(dw, dw_r) < tol
    assert not dw_r[vocab:].any(), "padding rows of W get no gradient (the recompute backward)"
    for save in (True, False):  # no rows: no product writes dW, which is all zero
        w0 = w.clone().requires_grad_()
        lp0, _ = head.logprob_head(h[:0].clone().requires_grad_(), w0, tgt[:0], vocab, save_probs=save)
        (dw0,) = torch.autograd.grad(lp0.sum(), [w0])
        assert dw0.shape == w.shape and not dw0.any(), "T = 0: dW all zero"
    with_ent = run(True, ge)
    assert all(torch.equal(a, b) for a, b in zip(with_ent, run(False, ge))), "entropy gradient: the recompute path"


def test_head_dh_split_buckets_close_to_float64_and_deterministic(monkeypatch):
    """dh of the kept-probabilities backward in each of ``DH_SPLIT``'s buckets (vocab split-K: ragged groups of the
    vocab, the partials folded in order) and in the plain order above them: within rounding of float64, identical
    run to run, the bucket's launch the one taken."""
    head = _mod("logprob_head")
    bounds = [b for b, _ in head.DH_SPLIT]
    g = torch.Generator().manual_seed(12)
    vocab = 700
    w = rand(g, vocab, 64, scale=0.3)
    taken = []
    real_mm = head.mm
    monkeypatch.setattr(head, "mm", lambda *a, **kw: taken.append(kw.get("groups")) or real_mm(*a, **kw))
    for t in (*bounds, bounds[-1] + 1):
        h, gl = rand(g, t, 64), rand(g, t)
        tgt = torch.randint(0, vocab, (t,), generator=g).to(DEV)

        def grads(h=h, tgt=tgt, gl=gl):
            hr = h.clone().requires_grad_()
            return torch.autograd.grad(head.logprob_head(hr, w, tgt, vocab)[0], [hr], gl)[0]

        taken.clear()
        dh = grads()
        assert taken[0] == next((gr for b, (gr, _) in head.DH_SPLIT if t <= b), 1), (t, taken)
        assert torch.equal(dh, grads()), f"T={t}: dh run to run"
        h64 = h.double().requires_grad_()
        lp = (h64 @ w.double().T).log_softmax(-1).gather(1, tgt[:, None])[:, 0]
        (dh64,) = torch.autograd.grad(lp, [h64], gl.double())
        assert rel_err(dh, dh64) < (2e-3 if NATIVE else 1e-5), (t, rel_err(dh, dh64))


def test_head_keeps_probs_only_for_a_recorded_gradient():
    """Probabilities are kept (T x V) only where a backward will read them: not under no_grad, not
    for inputs without requires_grad, not with save_probs=False."""
    head = _mod("logprob_head")
    g = torch.Generator().manual_seed(10)
    h, w = rand(g, 8, 64), rand(g, 300, 64)
    tgt = torch.randint(0, 300, (8,), generator=g).to(DEV)

    def kept(hh, ww, **kw):
        lp, _ = head.logprob_head(hh, ww, tgt, 300, **kw)
        return lp.grad_fn is not None and len(lp.grad_fn.saved_tensors) > 5

    hr = h.clone().requires_grad_()
    assert kept(hr, w)
    assert not kept(hr, w, save_probs=False)
    assert not kept(h, w)
    with torch.no_grad():
        assert not kept(hr, w)


def test_head_refuses_targets_out_of_range_without_a_host_sync():
    """Targets outside [0, V) raise an IndexError naming their range before any result is returned; on a GPU the
    range is read without a host sync (``checks.range_later``, after the head's kernels are queued): a forward and
    backward run under ``torch.cuda.set_sync_debug_mode("error")``, which raises on any synchronizing call."""
    import re

    head = _mod("logprob_head")
    g = torch.Generator().manual_seed(11)
    h, w = rand(g, 8, 64), rand(g, 300, 64)
    tgt = torch.randint(0, 300, (8,), generator=g).to(DEV)
    for i, bad, seen in ((3, -1, "[-1, "), (5, 300, ", 300]")):
        wrong = tgt.clone()
        wrong[i] = bad
        for save in (True, False):
            with pytest.raises(IndexError, match=re.escape("targets must lie in [0, 300), got range ") + ".*"
                               + re.escape(seen)):
                head.logprob_head(h.clone().requires_grad_(), w, wrong, 300, save_probs=save)
    if NATIVE:
        hr = h.clone().requires_grad_()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            lp = head.logprob_head(hr, w, tgt, 300)[0]
            (dh,) = torch.autograd.grad(lp, [hr], torch.ones_like(lp))
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert torch.equal(lp, head.logprob_head_forward(h, w, tgt, 300)) and dh.isfinite().all()


# --- whole model ---------------------------------------------------------------------------------

def test_tiny_qwen3_training_equals_paged_runner():
    from rlk_models.families import FAMILIES
    from rlk_models.qwen3 import RLKQwen3Config, RLKQwen3ForCausalLM
    from rlk_models.testing.paged_runner import PagedRunner, training_logprobs

    torch.manual_seed(0)
    model = RLKQwen3ForCausalLM(RLKQwen3Config(**dict(FAMILIES['qwen3'].tiny, vocab_size=300), rlk_backend="triton"))
    model = model.to(DEV).eval()
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, 300, (n,), generator=g).tolist() for n in (70, 3, 20)]
    want = training_logprobs(model, seqs)
    got = PagedRunner(model, block_size=16).logprobs(seqs, prefill_lens=[40, 1, 0], token_budget=24,
                                                     arrivals=[0, 1, 2])
    for s, (a, b) in enumerate(zip(want, got)):
        if NATIVE:
            assert torch.equal(a, b), f"sequence {s}: paged runner != training (triton)"
        else:  # the interpreter's dot order follows the host BLAS (module docstring)
            assert float((a - b).abs().max()) < 1e-5, f"sequence {s}: paged runner far from training"
    ref = RLKQwen3ForCausalLM(RLKQwen3Config(**dict(FAMILIES['qwen3'].tiny, vocab_size=300))).eval()
    ref.load_state_dict({n: t.cpu() for n, t in model.state_dict().items()})
    assert max(float((a - b).abs().max()) for a, b in zip(want, training_logprobs(ref, seqs))) < (1e-2 if NATIVE
                                                                                              else 1e-4)


@pytest.mark.parametrize("split", [1, 4])  # per group: 8 partials; per half: 2
@pytest.mark.parametrize("bias", [False, True])
def test_add_rms_norm_of_unfolded_partials_is_the_linear_then_add_rms_norm(split, bias):
    """``matmul.linear_unfolded``'s ``Partials`` (a split launch's fp32 partials, the fold left to the next op) through
    ``add_rms_norm``: the bits of the row-parallel linear's output (its own fold kernel) then ``add_rms_norm``, both
    outputs; where the launch does not split, ``linear_unfolded`` is that output itself."""
    mm, norm = _mod("matmul"), _mod("rms_norm")
    from rlk_models.ops.canonical import Partials

    g = torch.Generator().manual_seed(30 + split)
    k, n = 1024, 96  # 8 groups of 128
    # random values, not dyadic ones: the fold's order and the output's rounding show under the interpreter too
    # (fp16 there: its bf16 dots are not the GPU's)
    bf = torch.bfloat16 if NATIVE else torch.float16
    x, w = rand(g, 5, k, dtype=bf), rand(g, n, k, dtype=bf, scale=0.05)
    b = rand(g, n, dtype=bf) if bias else None
    res, nw = rand(g, 5, n, dtype=bf), rand(g, n, dtype=bf)
    lc = mm.Launch((16, 32, 4, 2), split=split)
    with torch.no_grad():
        parts = mm.mm(x, w, b, groups=8, launch=lc, tma=False, fold=False)
        assert isinstance(parts, Partials) and parts.parts.shape == (8 // split, 5, n)
        want = norm.add_rms_norm(mm.mm(x, w, b, groups=8, launch=lc, tma=False), res, nw, 1e-6)
        got = norm.add_rms_norm(parts, res, nw, 1e-6)
        assert all(torch.equal(a, c) for a, c in zip(got, want)), "partials folded in the norm"
        plain = mm.mm(x, w, b, groups=8, launch=mm.Launch((16, 32, 4, 2)), tma=False, fold=False)
        assert isinstance(plain, torch.Tensor) and torch.equal(plain, mm.mm(x, w, b, groups=8, launch=lc, tma=False))
    with pytest.raises(ValueError, match="inference"):
        norm.add_rms_norm(parts, res.clone().requires_grad_(), nw, 1e-6)
    # the fold's order itself (test_matmul_row_parallel_adds_two_halves' case, fp32 output): 2^24 in group 0 and a 1
    # in each of groups 4 and 5 -- the halves give 2^24 + 2, a fold of all 8 in one run 2^24
    x, w = torch.zeros(1, k, device=DEV), torch.zeros(1, k, device=DEV)
    x[0, 0], x[0, 4 * 128], x[0, 5 * 128 + 64] = 2.0 ** 24, 1.0, 1.0
    w[0, [0, 4 * 128, 5 * 128 + 64]] = 1.0
    with torch.no_grad():
        parts = mm.mm(x, w, groups=8, launch=lc, tma=False, fold=False)
        s = norm.add_rms_norm(parts, torch.zeros(1, 1, device=DEV), torch.ones(1, device=DEV), 1e-6)[1]
    assert s.item() == 2.0 ** 24 + 2


def test_vllm_row_parallel_method_leaves_the_fold_to_the_norm_unless_observed():
    """The vLLM class's row-parallel layer at TP=1 (``RLKRowParallelMethod.apply``) returns the split launch's
    ``Partials`` at decode sizes, whose ``add_rms_norm`` is the bits of the folded output's; with a hook on the layer
    (``rlk-bisect`` records its output) it folds itself, the linear's output."""
    from torch import nn

    from rlk_models.modeling.vllm import RLKRowParallelMethod
    from rlk_models.ops import get_backend
    from rlk_models.ops.canonical import Partials

    ops, norm = get_backend("triton"), _mod("rms_norm")
    g = torch.Generator().manual_seed(33)
    dt = torch.bfloat16 if NATIVE else torch.float16
    layer = nn.Module()
    layer.tp_size, layer.weight, layer.bias = 1, rand(g, 64, 1024, dtype=dt, scale=0.05), rand(g, 64, dtype=dt)
    x, res, nw = rand(g, 3, 1024, dtype=dt), rand(g, 3, 64, dtype=dt), rand(g, 64, dtype=dt)
    method = RLKRowParallelMethod("triton")
    with torch.no_grad():
        want = ops.linear(x, layer.weight, layer.bias, row_parallel=True)
        out = method.apply(layer, x)
        assert isinstance(out, Partials)
        assert all(torch.equal(a, b) for a, b in zip(norm.add_rms_norm(out, res, nw, 1e-6),
                                                     norm.add_rms_norm(want, res, nw, 1e-6)))
        layer.register_forward_hook(lambda *args: None)
        folded = method.apply(layer, x)
        assert isinstance(folded, torch.Tensor) and torch.equal(folded, want)


def test_host_cdiv_and_next_power_of_2_are_tritons():
    """The launch path's host ``cdiv`` and ``next_power_of_2`` (plain Python: Triton's are constexpr functions,
    ~2 us a host call) give Triton's values: they size grids and the RMSNorm's rows a program and blocks, which
    fix its summation order."""
    from rlk_models.ops.triton.utils import cdiv, next_power_of_2

    assert [next_power_of_2(n) for n in range(70_000)] == [triton.next_power_of_2(n) for n in range(70_000)]
    pairs = [(a, b) for a in range(0, 2_100, 7) for b in (1, 2, 3, 16, 64, 96, 128, 256, 1000)]
    assert [cdiv(a, b) for a, b in pairs] == [triton.cdiv(a, b) for a, b in pairs]


def test_ops_outside_autograd_give_the_recorded_outputs(monkeypatch):
    """Where no gradient is recorded (grad mode off, or no input requiring one) an op runs its Function's forward
    alone (``autograd.run_forward``: no ``Function.apply``, no graph node, nothing saved); bit for bit the outputs the
    recorded call gives, and a recorded call still gets its node."""
    from rlk_models.ops import rope_table

    applied = []
    real_apply = torch.autograd.Function.apply.__func__
    monkeypatch.setattr(torch.autograd.Function, "apply",
                        classmethod(lambda cls, *a, **kw: applied.append(cls.__name__) or real_apply(cls, *a, **kw)))

    tri = get_backend("triton")
    g = torch.Generator(device=DEV).manual_seed(0)
    t, hq, hk, d, hid, inter = 12, 4, 2, 64, 256, 384

    def r(*shape):
        return torch.randn(*shape, device=DEV, generator=g)

    x, res, w_norm = r(t, hid), r(t, hid), r(hid)
    w, w_down, b = r(96, hid) / 16, r(hid, inter) / 16, r(96)
    gate_up = r(t, 2 * inter)
    qkv = r(t, (hq + 2 * hk) * d)
    wq, wk = r(d), r(d)
    pos = torch.arange(t, device=DEV)
    table = rope_table(d, 64, {"rope_type": "default", "rope_theta": 1e6}).to(DEV)
    cu = torch.tensor([0, 5, t], device=DEV, dtype=torch.int32)
    emb, ids = r(50, hid), torch.randint(0, 50, (t,), device=DEV, generator=g)

    def heads(qkv_):
        return (qkv_[:, :hq * d].view(t, hq, d), qkv_[:, hq * d:(hq + hk) * d].view(t, hk, d),
                qkv_[:, (hq + hk) * d:].view(t, hk, d))

    cases = {
        "linear": lambda a: tri.linear(a["x"], w, b),
        "linear row-parallel": lambda a: tri.linear(a["x"], w, row_parallel=True),
        "silu_mul": lambda a: tri.silu_mul(a["gate_up"]),
        "silu_mul_linear": lambda a: tri.silu_mul_linear(a["gate_up"], w_down),
        "rms_norm": lambda a: tri.rms_norm(a["x"], w_norm, 1e-6),
        "add_rms_norm": lambda a: tri.add_rms_norm(a["x"], res, w_norm, 1e-6),
        "rms_norm_rope": lambda a: tri.rms_norm_rope(heads(a["qkv"])[0], wq, 1e-6, pos, table),
        "qk_norm_rope": lambda a: tri.qk_norm_rope(*heads(a["qkv"])[:2], wq, wk, 1e-6, pos, table),
        "rope": lambda a: tri.rope(heads(a["qkv"])[1].contiguous(), pos, table),
        "attention": lambda a: tri.varlen_attention(*heads(a["qkv"]), cu, d ** -0.5),
        "embedding": lambda a: tri.embedding(ids, a["emb"]),
    }
    for name, op in cases.items():
        leaves = {"x": x, "gate_up": gate_up, "qkv": qkv, "emb": emb}
        recorded = op({k: v.clone().requires_grad_() for k, v in leaves.items()})
        assert applied, f"{name}: recorded without Function.apply"
        applied.clear()
        with torch.no_grad():
            plain = op(leaves)
        assert not applied, f"{name}: {applied} applied with no gradient recorded"
        recorded, plain = (recorded, plain) if isinstance(plain, tuple) else ((recorded,), (plain,))
        assert all(o.grad_fn is not None for o in recorded), name
        assert all(o.grad_fn is None and not o.requires_grad for o in plain), name
        assert all(torch.equal(a.detach(), p) for a, p in zip(recorded, plain, strict=True)), name
