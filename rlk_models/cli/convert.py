"""``rlk-convert SRC DST [--to rlk|hf]``: see ``rlk_models.conversion.convert``."""

from __future__ import annotations

import argparse
import re
import sys

from ..conversion.convert import DEFAULT_MAX_SHARD_BYTES, ConversionError, convert
from .common import add_verbose, one_line_errors

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def _size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 500MB, 2GB)")
    return int(float(m[1]) * _UNITS[m[2].upper()])


@one_line_errors("rlk-convert")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rlk-convert", description=(
        "Convert a transformers Qwen3/Llama checkpoint into an rlk checkpoint (--to rlk, default) "
        "or an rlk checkpoint back into one that stock transformers loads (--to hf)."))
    ap.add_argument("src", help="source checkpoint directory")
    ap.add_argument("dst", help="destination directory (must not exist unless --force)")
    ap.add_argument("--to", choices=["rlk", "hf"], default="rlk")
    ap.add_argument("--force", action="store_true", help="replace an existing destination")
    ap.add_argument("--allow-pickle", action="store_true", help="read pickle .bin weights (trusted sources only)")
    ap.add_argument("--max-shard-size", type=_size, default=DEFAULT_MAX_SHARD_BYTES, help="e.g. 2GB (default)")
    ap.add_argument("--backend", default=None, help="rlk_backend written into the rlk config (default: reference)")
    add_verbose(ap)
    args = ap.parse_args(argv)
    try:
        out = convert(args.src, args.dst, args.to, force=args.force, allow_pickle=args.allow_pickle,
                      max_shard_bytes=args.max_shard_size, rlk_backend=args.backend)
    except ConversionError as e:
        print(f"rlk-convert: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
