"""What the Gluon kernels for Hopper (``attention_sm90``, ``head_sm90``, ``matmul_sm90``) share: the
sm_90 test, the shared-memory layout of their TMA descriptors, and the mbarriers of their
warp-specialized schedule -- a ring of K/V or K-step slots that the loader fills and the consumers
free, and the consumers' turns at the tensor cores."""

from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}


def is_sm90(x: torch.Tensor) -> bool:
    """Whether ``x`` lives on an sm_90 GPU (the H100 / H200), where these kernels build."""
    return x.is_cuda and _capability(x.device.index) == (9, 0)


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def smem_layout(block: list[int], dtype: torch.dtype):
    """The NVMMA shared-memory layout of a TMA descriptor's ``block`` of ``dtype``: made once per (block, dtype), as
    the layout is a frozen dataclass, where every launch made it again (a Triton constexpr function called from the
    host; those calls took 182 us of a 128-row head forward + backward's Python profile on the H200, session 38, a
    profile that inflates small calls -- the saving has not been timed without it)."""
    return _smem_layout(tuple(block), dtype)


@functools.cache
def _smem_layout(block: tuple[int, ...], dtype: torch.dtype):
    return gl.NVMMASharedLayout.get_default_for(list(block), GL_DTYPES[dtype])


@gluon.jit
def ring(NUM_BUF: gl.constexpr, USERS: gl.constexpr):
    """(ready, empty): a slot's mbarriers -- ``ready`` completes when the loader's copies into it land,
    ``empty`` when its ``USERS`` consumers have each freed it."""
    ready = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_BUF, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_BUF):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=USERS)
    return ready, empty


@gluon.jit
def turns(COUNT: gl.constexpr = 2):
    """The consumers' turns at the tensor cores: each waits on its own, arrives on the next's (the other's,
    of two); consumer 0 goes first."""
    turn = gl.allocate_shared_memory(gl.int64, [COUNT, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(COUNT):
        mbarrier.init(turn.index(i), count=1)
    mbarrier.arrive(turn.index(0), count=1)
    return turn
