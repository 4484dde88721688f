"""A planted *non-invariant* op backend for the diagnostics tests: the reference backend with
its linear swapped for plain torch (MKL on CPU, whose row results change with M). Importing
this module registers it as ``rlk_backend="planted"``."""

import torch.nn.functional as F

from rlk_models.ops import register_backend
from rlk_models.ops.reference import *  # noqa: F401,F403  (every other op: the reference's)
from rlk_models.ops.reference import FINGERPRINT as _REFERENCE
from rlk_models.ops.reference import is_available  # noqa: F401

NAME = "planted"
FINGERPRINT = {**_REFERENCE, "backend": NAME}


def linear(x, weight, bias=None, out_dtype=None, row_parallel=False):
    return F.linear(x, weight, bias).to(out_dtype or x.dtype)


register_backend(NAME, __name__)
