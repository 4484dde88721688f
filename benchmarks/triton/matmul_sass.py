"""The matmul's TMA kernel compiled for the H200 (sm_90) on any machine, no GPU needed: per launch
form a hash of its machine code (SASS), registers, spill stack, shared memory, and the number of
loops left in its TTGIR after Triton's loop-nest fusion and pipelining, and whether ptxas serialized
its wgmma pipeline (``wgmma_serialized``: ptxas's reasons; empty when the wgmmas overlap).

What it is for: a kernel refactor that must not change the defaults shows the same SASS hashes
before and after (run it on both commits and diff the JSON); a new form shows whether the compiler
did what it was meant to (the flat form: one fused loop per run of groups instead of a K loop per
group) and whether it spills. Speed still needs the GPU (matmul_sweep.py); this is the check that
runs between device sessions.

    python benchmarks/triton/matmul_sass.py > now.json    # then the same on the other commit, diff
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from rlk_models.ops.triton.matmul import (
    FOLD_BLOCK,
    HALF,
    K_GROUPS,
    LAUNCHES,
    TUNED,
    Launch,
    _fold_kernel,
    _mm_tma_kernel,
    fitted_config,
    run_of,
    sm90_fallback,
)
from rlk_models.ops.triton.utils import BLOCK_K, ONE_PASS

TARGET = GPUTarget("cuda", 90, 32)
BLOCK_KS = (BLOCK_K, 2 * BLOCK_K, 4 * BLOCK_K)  # ``Launch.block_k``'s loads: one, two or four K-tiles a step


def _cuobjdump() -> str:
    import triton.backends.nvidia as nv

    return os.path.join(os.path.dirname(nv.__file__), "bin", "cuobjdump")


def compile_form(launch: Launch, groups: int, a_km: bool = False, b_kn: bool = False, bias: bool = False):
    """The compiled kernel of one launch form (bf16 in and out, fp32 partials when split)."""
    split = launch.split if groups > 1 else 0
    bk = launch.block_k
    bm, bn, warps, stages = fitted_config(launch.config, 2, 4 if split else 2, block_k=bk)  # as mm() runs it
    c_t = launch.swap
    a_block = f"{bk}, {bm}" if a_km else f"{bm}, {bk}"
    b_block = f"{bk}, {bn}" if b_kn else f"{bn}, {bk}"
    c_desc = (f"tensordesc<fp32[1, {bm}, {bn}]>" if split else
              f"tensordesc<bf16[{bn}, {bm}]>" if c_t else f"tensordesc<bf16[{bm}, {bn}]>")
    args = dict(a_desc=f"tensordesc<bf16[{a_block}]>", b_desc=f"tensordesc<bf16[{b_block}]>", c_desc=c_desc,
                bias_ptr="*bf16", M="i32", N="i32", K="i32", KG="i32")
    consts = dict(HAS_BIAS=bias, GROUPS=groups, RUN=run_of(groups), SPLIT=split, A_KM=a_km, B_KN=b_kn, BLOCK_M=bm,
                  BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, C_T=c_t, FLAT=launch.flat,
                  NUM_PROGS=132 if launch.persistent and not split and not launch.flat else ONE_PASS)
    names = _mm_tma_kernel.arg_names
    sig = {n: args.get(n, "constexpr") for n in names}
    src = ASTSource(_mm_tma_kernel, sig, {(names.index(n),): v for n, v in consts.items()})
    return triton.compile(src, target=TARGET, options=dict(num_warps=warps, num_stages=stages))


def build(fn, types: dict, consts: dict, div16, warps: int, stages: int | None = None):
    """``fn`` compiled for sm_90: ``types`` of its run-time arguments (the rest are ``consts``). Pointers
    and the integers named in ``div16`` are marked multiples of 16, as Triton marks them at launch
    (vLLM's cache and torch's allocations give that): without it the compiler cannot vectorise the
    loads and does not pipeline them. ``stages``: Triton's default when None."""
    names = fn.arg_names
    sig = {n: types.get(n, "constexpr") for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names
             if types.get(n, "").startswith("*") or n in div16}
    src = ASTSource(fn, sig, {(names.index(n),): v for n, v in consts.items()}, attrs)
    options = dict(num_warps=warps) if stages is None else dict(num_warps=warps, num_stages=stages)
    return triton.compile(src, target=TARGET, options=options)


def build_gluon(fn, descs: dict, types: dict, consts: dict, div16, maxnreg: int):
    """``build`` for a Gluon kernel (``gluon.jit``, 4 warps at launch, ``maxnreg`` registers a thread):
    ``descs`` names its arguments' host TMA descriptors (over CPU tensors: only their types count)."""
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    types = {**{n: mangle_type(d) for n, d in descs.items()}, **types}
    names = fn.arg_names
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names
             if types.get(n, "").startswith("*") or n in div16}
    src = GluonASTSource(fn, {n: types.get(n, "constexpr") for n in names},
                         {(names.index(n),): v for n, v in consts.items()}, attrs)
    return triton.compile(src, target=TARGET, options=dict(num_warps=4, maxnreg=maxnreg))


def wgmma_serialized(kernel) -> list[str]:
    """What ptxas says when it serializes the kernel's wgmma pipeline (its "Potential Performance
    Loss" notes, e.g. C7514: a non-wgmma instruction reads an in-flight wgmma's accumulator
    registers). ptxas then waits after every wgmma in the function: the same bits, silently slower.
    Triton does not show these notes, so the PTX is compiled again with ``-v``."""
    ptxas = os.path.join(os.path.dirname(_cuobjdump()), "ptxas")
    with tempfile.NamedTemporaryFile(suffix=".ptx", mode="w") as f:
        f.write(kernel.asm["ptx"])
        f.flush()
        log = subprocess.run([ptxas, f"-arch=sm_{TARGET.arch}a", "-v", f.name, "-o", os.devnull], capture_output=True,
                             text=True, check=True).stderr
    return sorted(set(re.findall(r"\((C\d+)\) Potential Performance Loss: (.*?) in the function", log)))


def describe(kernel) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        sass = subprocess.run([_cuobjdump(), "-sass", f.name], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([_cuobjdump(), "-res-usage", f.name], capture_output=True, text=True,
                               check=True).stdout
    # instructions only: no addresses or encodings, so two builds of the same code hash the same
    code = [re.sub(r"\s+", " ", re.sub(r"/\*[0-9a-f]{4,}\*/", "", line)).strip()
            for line in sass.splitlines() if "/*" in line and ";" in line]
    reg, stack = (int(re.search(rf"{k}:(\d+)", usage).group(1)) for k in ("REG", "STACK"))
    return {"sass": hashlib.sha1("\n".join(code).encode()).hexdigest()[:12], "instructions": len(code),
            "mma": sum(1 for line in code if re.match(r"(@!?U?P\d+ )?H(G)?MMA\.", line)),  # wgmma / mma.sync
            "registers": reg, "warps": kernel.metadata.num_warps, "spill_stack_bytes": stack,
            "shared_bytes": kernel.metadata.shared,
            "loops": kernel.asm["ttgir"].count("scf.for"),
            # a 64-bit division or remainder left in the PTX has a run-time divisor (LLVM turns constant ones into
            # multiplies): on sm_90 a subroutine call a thread (rowwise_sass.py)
            "int64_divisions": len(re.findall(r"\b(?:div|rem)\.[su]64\b", kernel.asm["ptx"])),
            "wgmma_serialized": [f"{code}: {why}" for code, why in wgmma_serialized(kernel)]}


def forms() -> dict[str, tuple[Launch, int, dict]]:
    """Every default launch (forward; and the plain ones as the two backward layouts), plus the
    flat form of each grouped default that is fused or split by halves, each default up to 64 rows or loading
    wider K-tiles with each of its other K-tile loads (``Launch.block_k``: ``/block_k=64``, ``128``, ``256``)."""
    out = {}
    tables = {f"{kind}/{width}": (kind, table) for (kind, width), table in LAUNCHES.items()
              if not (table is LAUNCHES["groups", "narrow"] and width == "wide")}  # the same table
    tables |= {f"{kind}/N={n},K={k}": (kind, table) for (kind, n, k), table in TUNED.items()}
    for where, (kind, table) in tables.items():
        groups = K_GROUPS if kind == "groups" else 1
        for bound, lc in table:
            if lc is None:  # a TUNED range that keeps the table's launch
                continue
            name = f"{where}/M<={bound if bound < 1 << 40 else 'inf'}"
            fallback = lc.sm90  # the Gluon form: gluon_sass.py builds it; here the Triton form it falls back to (a
            # plain layer's in the backward's layouts too, which the Gluon form does not serve)
            if fallback:
                lc, name = sm90_fallback(lc, kind), name + "/fallback"
            out[name] = (lc, groups, {})
            if kind == "plain" and not lc.swap:
                out[name + "/dx"] = (lc, 1, dict(b_kn=True))
                out[name + "/dw"] = (lc, 1, dict(a_km=True))
            if kind == "groups" and lc.split in (0, HALF) and not fallback:
                out[name + "/flat"] = (lc._replace(flat=True, persistent=False), groups, {})
            if (bound <= 64 or lc.block_k != BLOCK_K) and not fallback:  # the other K-tile loads beside it
                for other in {*BLOCK_KS} - {lc.block_k}:
                    out[f"{name}/block_k={other}"] = (lc._replace(block_k=other), groups, {})
    return out


def fold_run(parts: int) -> int:
    """The run a fold of ``parts`` partials of the canonical K-groups folds from zero, as ``mm`` hands it on
    (``run_of(groups) // split``, ``parts = groups // split``): 4 for the 8 groups' partials, 1 for the halves'."""
    return run_of(K_GROUPS) // (K_GROUPS // parts)


def fold_forms() -> dict:
    """``_fold_kernel`` (a split launch's second kernel, and ``combine_partials``'s) for 2 partials (halves) and 8
    (groups, runs of 4): built here because a fold that ran under the interpreter failed to compile on the GPU
    (session 47). Without a bias (Qwen3's row-parallel layers) and with one (``/bias``: Llama's with
    ``attention_bias``/``mlp_bias``; until session 49 its column was an int64 remainder of a flat index by N)."""
    types = dict(p_ptr="*fp32", c_ptr="*bf16", bias_ptr="*bf16", M="i32", N="i32")
    return {f"fold/parts={parts}{'/bias' if bias else ''}": build(
        _fold_kernel, types, dict(HAS_BIAS=bias, GROUPS=parts, RUN=fold_run(parts), BLOCK=FOLD_BLOCK), ("N",), 4)
        for parts in (K_GROUPS // HALF, K_GROUPS) for bias in (False, True)}


def main() -> None:
    res = {}
    for name, (lc, groups, kw) in forms().items():
        res[name] = {"launch": str(lc), **describe(compile_form(lc, groups, **kw))}
    for name, kernel in fold_forms().items():
        res[name] = {"launch": "_fold_kernel", **describe(kernel)}
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
