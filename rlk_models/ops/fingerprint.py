"""Contract fingerprint: which numerics a checkpoint was converted for, checked at load.

``rlk-convert`` writes ``rlk_fingerprint`` into the rlk config: the op backend's FINGERPRINT
(backend name, contract version, tile/group constants) plus the weights' dtype. Both model
classes compare it with what they are about to run -- the configured backend's fingerprint and
the dtype they compute in -- and refuse to load on any difference, so a training class and a
vLLM engine with incompatible numerics fail loudly instead of disagreeing silently. Pass
``rlk_check_fingerprint=False`` (a config field: ``from_pretrained(..., rlk_check_fingerprint=False)``
or vLLM's ``hf_overrides``) to load anyway, e.g. in float32 for an accuracy study.
"""

from __future__ import annotations

import torch

from . import get_backend


class FingerprintMismatch(ValueError):
    pass


def dtype_name(dtype: torch.dtype | str) -> str:
    return str(dtype).removeprefix("torch.")


def expected_fingerprint(backend: str, dtype: torch.dtype | str) -> dict:
    return {**get_backend(backend).FINGERPRINT, "dtype": dtype_name(dtype)}


def check_fingerprint(config, dtype: torch.dtype | str, who: str) -> None:
    """Raise ``FingerprintMismatch`` if ``config.rlk_fingerprint`` (when present) differs from
    what ``who`` runs: backend ``config.rlk_backend`` computing in ``dtype``."""
    recorded = getattr(config, "rlk_fingerprint", None)
    if not recorded or not getattr(config, "rlk_check_fingerprint", True):
        return
    running = expected_fingerprint(config.rlk_backend, dtype)
    diffs = {k: (recorded.get(k), running.get(k)) for k in sorted(set(recorded) | set(running))
             if recorded.get(k) != running.get(k)}
    if diffs:
        detail = ", ".join(f"{k}: checkpoint {a!r} vs {who} {b!r}" for k, (a, b) in diffs.items())
        raise FingerprintMismatch(
            f"{who} would not reproduce the numerics this checkpoint was converted for ({detail}). "
            "Re-convert for this backend/dtype, or pass rlk_check_fingerprint=False to load anyway "
            "(its log-probs will not match an engine using the recorded numerics).")
