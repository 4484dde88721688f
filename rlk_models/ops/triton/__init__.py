"""Triton kernels (GPU), work in progress toward the ``triton`` backend.

Not yet registered as a backend: only the batch-invariant matmul exists so far
(``matmul.py``); norms, RoPE, SiLU-mul, the fused log-prob head and attention follow. Import
this package only where Triton and a GPU (or ``TRITON_INTERPRET=1``) are available.
"""
