"""HF <-> rlk checkpoint conversion (``rlk-convert``)."""

from .convert import ConversionError, convert

__all__ = ["ConversionError", "convert"]
