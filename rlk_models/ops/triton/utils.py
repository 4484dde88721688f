"""Pieces the Triton op files share: the K loop of a tile in the contract's order, the SM count
and the pipeline depth that fits shared memory."""

from __future__ import annotations

import functools
import threading

import torch
import triton
import triton.language as tl

BLOCK_K = 64  # every dot product walks K in tiles of this size, in order: part of the contract
# A tile loop's stride when every program takes one tile: any constant above the tile count gives one pass. A
# stride is a constexpr, so it must not follow the step's size (a compiled kernel per size).
ONE_PASS = 1 << 24


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) of host ints, for grids and tile counts: ``triton.cdiv`` is a Triton constexpr function (3.6),
    whose host call unwraps its arguments, several times a launch on ``mm``'s path."""
    return -(-a // b)


def device_file(directory, name: str, suffix: str):
    """The packaged file of the GPU model ``name`` (``torch.cuda.get_device_name``'s, spaces as underscores) in
    ``directory`` (a ``Path``), present or not: the launch files' and the kernel files' one naming rule."""
    return directory / f"{name.replace(' ', '_')}{suffix}"


def next_power_of_2(n: int) -> int:
    """``triton.next_power_of_2`` of a host int (0 for n <= 0, as Triton's gives for 0), without its constexpr call."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


@triton.jit
def dot_k_range(a_ptr, b_ptr, rm, rn, rk, M, N, K, k_lo, k_hi, sam, sak, sbn, sbk, part, BLOCK_K: tl.constexpr):
    """part += A[rm, k_lo:k_hi] @ B[rn, k_lo:k_hi]^T, K-tiles in increasing order (pointer loads,
    masked: any strides; runs in the interpreter)."""
    for k0 in range(k_lo, k_hi, BLOCK_K):
        k = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * sam + k[None, :] * sak, mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k[:, None] * sbk + rn[None, :] * sbn, mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0)
        part = tl.dot(a, b, part)
    return part


@functools.cache
def _sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _cuda_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def num_sms(device: torch.device) -> int:
    """SMs of ``device`` (4 under the interpreter): sizes persistent grids, never the K order."""
    if device.type != "cuda":
        return 4
    return _sms(_cuda_index(device))


_bound = threading.local()


def bind_cuda_context(device: torch.device) -> None:
    """Make ``device``'s primary CUDA context current on this thread before a TMA descriptor is
    made. Triton fills host-side descriptors (``cuTensorMapEncodeTiled``) in Python before its
    launcher binds the context, and a thread that never touched CUDA has none: autograd's device
    thread when the first op of a backward is a TMA matmul fails with "invalid device context"
    (pytorch/pytorch#124565). One CUDA runtime call per thread and device binds it
    (``cudaMemGetInfo``), made outside stream capture only, where it could not upset a capture."""
    if device.type != "cuda":  # the interpreter: host tensors, no context
        return
    index = _cuda_index(device)
    seen = getattr(_bound, "devices", None)
    if seen is None:
        seen = _bound.devices = set()
    if index not in seen and not torch.cuda.is_current_stream_capturing():
        torch.cuda.mem_get_info(index)
        seen.add(index)


def fit_stages(rows: int, elem_size: int, stages: int, out_bytes: int = 0, budget: int = 216 * 1024,
               block_k: int = BLOCK_K) -> int:
    """Pipeline depth that fits shared memory: (rows of A + rows of B) x block_k operand tiles
    per stage, plus ``out_bytes`` of epilogue staging (fp32 operands need half the stages of
    bf16). Stages never change the K order, hence the bits."""
    return max(1, min(stages, (budget - out_bytes) // (rows * block_k * elem_size)))


def tma_ok(*ts: torch.Tensor) -> bool:
    """Whether a TMA descriptor can address each tensor: on the GPU, unit last stride, 16-byte
    aligned base and strides (else the kernels take their pointer path)."""
    return all(t.is_cuda and t.stride(-1) == 1 and all(s * t.element_size() % 16 == 0 for s in t.stride()[:-1])
               and t.data_ptr() % 16 == 0 for t in ts)
