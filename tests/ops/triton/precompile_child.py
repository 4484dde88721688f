"""``test_precompile.py``'s child process (no ``TRITON_INTERPRET``: the kernels must be JIT functions): records
the variants that real rlk kernels compile for sm_90 (``precompile.compile_only``: no GPU), replays the file into a
fresh Triton cache on threads, and calls the kernels again. Prints one JSON object.

    python tests/ops/triton/precompile_child.py RECORD_FILE FRESH_CACHE_DIR WORKERS
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from triton import knobs
from triton.tools.tensor_descriptor import TensorDescriptor

from rlk_models.ops.triton import matmul_sm90 as sm90
from rlk_models.ops.triton import precompile
from rlk_models.ops.triton.embedding import _emb_bwd
from rlk_models.ops.triton.matmul import ONE_PASS, _mm_tma_kernel, run_of

record, fresh_cache, workers = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
compiled = []  # (kernel, JIT key) of every compile, whoever made it
knobs.runtime.jit_post_compile_hook = lambda **kw: compiled.append((kw["fn"].name, kw["key"]))
precompile.record_to(record)  # chains the hook above
try:
    precompile.record_to(record.with_suffix(".other"))
    second_file = "accepted"
except RuntimeError as e:
    second_file = str(e)

a = torch.zeros(256, 4096, dtype=torch.bfloat16)
b = torch.zeros(4096, 4096, dtype=torch.bfloat16)
c = torch.zeros(256, 4096, dtype=torch.bfloat16)
g, ids = torch.zeros(8, 64, dtype=torch.bfloat16), torch.zeros(8, dtype=torch.int64)


def calls():
    """Three kernels (Triton pointer loads, Triton TMA, Gluon), each at two row counts that Triton specializes apart
    (a multiple of 16 and not), as their launchers call them."""
    for m in (256, 200):
        _emb_bwd.warmup(g, ids, ids, ids, g, m, BLOCK_D=256, grid=(1,))
        ad, bd = TensorDescriptor.from_tensor(a[:m], [64, 64]), TensorDescriptor.from_tensor(b, [128, 64])
        cd = TensorDescriptor.from_tensor(c[:m], [64, 128])
        _mm_tma_kernel.warmup(ad, bd, cd, c, m, 4096, 4096, 4096, False, 1, 1, 0, False, False, 64, 128, 64, 8,
                              ONE_PASS, num_warps=4, num_stages=4, C_T=False, FLAT=False, ACC=False, grid=(1,))
        consts, maxnreg = sm90.form(128, 128, 64, 5, 2, 2)
        sm90._mm_groups_ws.warmup(*sm90.descriptors(a[:m], b, c[:m], 128, 128, 64), c, m, 4096, 4096, 512, False, 8,
                                  run_of(8), **consts, num_warps=4, maxnreg=maxnreg, grid=(1,))


kernels = (_emb_bwd, _mm_tma_kernel, sm90._mm_groups_ws)
with precompile.compile_only():
    calls()
    first = list(compiled)
    lines = record.read_text().splitlines()
    for k in kernels:  # a new process: nothing compiled in memory, and (below) nothing in Triton's cache on disk
        k.device_caches.clear()
    # two stale lines: a kernel that is gone, and one whose recorded constexpr the kernel no longer compiles with
    stale = json.loads(lines[0])
    gone = {**stale, "name": "rlk_models.ops.triton.embedding._gone"}
    bad = {**stale, "constant_vals": [100], "key": stale["key"] + "-bad"}  # BLOCK_D: tl.arange needs a power of 2
    replay = record.with_suffix(".replay")
    replay.write_text("\n".join([*lines, json.dumps(gone), json.dumps(bad), lines[0]]) + "\n")
    os.environ["TRITON_CACHE_DIR"] = fresh_cache
    report = precompile.preload(replay, workers)
    preloaded = compiled[len(first):]
    calls()
    after = compiled[len(first) + len(preloaded):]

print(json.dumps({
    "first": first, "lines": len(lines), "recorded": [[v.kernel, json.loads(v.data)["key"]]
                                                      for v in precompile.read_variants(record)],
    "preloaded": preloaded, "after": after, "report": report._asdict(), "second_file": second_file,
    "fresh_cache_entries": len(os.listdir(fresh_cache)),
}))
