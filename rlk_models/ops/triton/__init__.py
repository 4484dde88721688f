"""Triton kernels (GPU), work in progress toward the ``triton`` backend.

Not yet registered as a backend. Done so far, each measured on an H200 (docs/benchmarks.md):
``matmul.py`` (forward), ``rms_norm.py`` and ``silu_mul.py`` (forward and backward). Still to
come: matmul backward + autograd, RoPE, embedding backward, the fused log-prob head, attention. Import
this package only where Triton and a GPU (or ``TRITON_INTERPRET=1``) are available.
"""
