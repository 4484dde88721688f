"""Contract fingerprint: which numerics a checkpoint was converted for, checked at load.

``rlk-convert`` writes ``rlk_fingerprint`` into the rlk config: the op backend's FINGERPRINT
(backend name, contract version, tile/group constants) plus the weights' dtype. Both model
classes compare it with what they are about to run -- the configured backend's fingerprint and
the dtype they compute in -- so a training class and a vLLM engine with incompatible numerics fail
loudly instead of disagreeing silently:

- the vLLM class (what rollouts are compared against) refuses any difference, and a checkpoint
  without a fingerprint;
- the training class refuses a different backend or contract, and a missing fingerprint when
  loading a checkpoint; a different *dtype* only warns, saying what parity needs: loading fp32
  master weights from a bf16 checkpoint (and computing in bf16 under autocast / FSDP mixed
  precision) is the standard training set-up, and an fp32 accuracy study is legitimate. Where the
  numbers are compared with or synced to an engine (``rlk-verify``, ``push_weights``) the dtype is
  checked again.

A malformed fingerprint (not a non-empty dict) is always refused. ``rlk_check_fingerprint=False``
(a config field: ``from_pretrained(..., rlk_check_fingerprint=False)`` or vLLM's ``hf_overrides``)
skips every check.
"""

from __future__ import annotations

import warnings

import torch

from . import get_backend


class FingerprintMismatch(ValueError):
    pass


def dtype_name(dtype: torch.dtype | str) -> str:
    return str(dtype).removeprefix("torch.")


def expected_fingerprint(backend: str, dtype: torch.dtype | str) -> dict:
    return {**get_backend(backend).FINGERPRINT, "dtype": dtype_name(dtype)}


def check_fingerprint(config, dtype: torch.dtype | str | None, who: str, *, required: bool = False,
                      dtype_strict: bool = True) -> None:
    """Raise ``FingerprintMismatch`` if ``config.rlk_fingerprint`` differs from what ``who`` runs:
    backend ``config.rlk_backend`` computing in ``dtype`` (module docstring). ``required``: a
    missing fingerprint is refused too; ``dtype_strict=False``: a dtype-only difference warns;
    ``dtype=None``: only presence and form are checked."""
    if not getattr(config, "rlk_check_fingerprint", True):
        return
    recorded = getattr(config, "rlk_fingerprint", None)
    if recorded is None:
        if required:
            raise FingerprintMismatch(
                f"{who}: the checkpoint's config.json has no rlk_fingerprint (not made by rlk-convert?), so "
                "nothing says which numerics it was converted for. Re-convert it with rlk-convert, or pass "
                "rlk_check_fingerprint=False to load anyway.")
        return
    if not isinstance(recorded, dict) or not recorded:
        raise FingerprintMismatch(f"{who}: rlk_fingerprint in config.json must be a non-empty object (as rlk-convert "
                                  f"writes it), got {recorded!r}; re-convert, or pass rlk_check_fingerprint=False")
    if dtype is None:
        return
    running = expected_fingerprint(config.rlk_backend, dtype)
    diffs = {k: (recorded.get(k), running.get(k)) for k in sorted(set(recorded) | set(running))
             if recorded.get(k) != running.get(k)}
    if set(diffs) == {"dtype"} and not dtype_strict:
        warnings.warn(f"{who} computes in {diffs['dtype'][1]}; the checkpoint was converted for {diffs['dtype'][0]}. "
                      f"Its log-probs equal a rollout engine's only when it computes in {diffs['dtype'][0]} "
                      "(e.g. bf16 autocast or FSDP mixed precision over these weights).", stacklevel=3)
        return
    if diffs:
        detail = ", ".join(f"{k}: checkpoint {a!r} vs {who} {b!r}" for k, (a, b) in diffs.items())
        raise FingerprintMismatch(
            f"{who} would not reproduce the numerics this checkpoint was converted for ({detail}). "
            "Re-convert for this backend/dtype, or pass rlk_check_fingerprint=False to load anyway "
            "(its log-probs will not match an engine using the recorded numerics).")
