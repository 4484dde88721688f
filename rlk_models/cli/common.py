"""What every console script shares: arguments checked before any work, errors as one line on
stderr (``-v`` / ``--verbose`` for the traceback), and checkpoint directories validated up front
(no Hub look-ups: a path that is not a local checkpoint is refused, not downloaded)."""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
from pathlib import Path


class CliError(Exception):
    """A refusal a console script reports as one line."""


def add_verbose(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("-v", "--verbose", action="store_true", help="show the traceback of an error")


def add_imports(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                    help="import MODULE first (e.g. one that registers an out-of-tree op backend)")


def import_modules(args: argparse.Namespace) -> None:
    for mod in args.imports:
        importlib.import_module(mod)


def at_least(lo: int):
    """argparse type: an int >= lo."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {value}")
        return value
    return parse


def checkpoint_dir(path: str | Path, *, rlk: bool | None = None, tokenizer: bool = False) -> Path:
    """``path`` as a local checkpoint directory with a config.json; ``rlk=True``: made by
    rlk-convert, ``False``: a transformers one; ``tokenizer``: must hold tokenizer files."""
    p = Path(path)
    if not p.is_dir():
        raise CliError(f"{path}: no such checkpoint directory (only local directories are read)")
    cfg = p / "config.json"
    try:
        model_type = str(json.loads(cfg.read_text()).get("model_type", ""))
    except FileNotFoundError:
        raise CliError(f"{path}: no config.json (not a checkpoint directory)") from None
    except (OSError, ValueError, AttributeError) as e:
        raise CliError(f"{cfg}: unreadable config ({e})") from None
    if rlk is True and not model_type.startswith("rlk_"):
        raise CliError(f"{path}: model_type {model_type!r} is not an rlk checkpoint; convert it first "
                       f"(rlk-convert {p} {p}-rlk)")
    if rlk is False and model_type.startswith("rlk_"):
        raise CliError(f"{path}: an rlk checkpoint where a transformers one is expected")
    if tokenizer and not any((p / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise CliError(f"{path}: no tokenizer files (tokenizer.json / tokenizer_config.json)")
    return p


def one_line_errors(prog: str):
    """Decorate a ``main(argv) -> int``: an exception becomes ``prog: error: ...`` on stderr and exit
    status 1 (2 for a ``CliError``), unless ``-v``/``--verbose`` asks for the traceback."""
    def deco(main):
        @functools.wraps(main)
        def wrapper(argv: list[str] | None = None) -> int:
            args = sys.argv[1:] if argv is None else argv
            try:
                return main(argv)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:
                if "-v" in args or "--verbose" in args:
                    raise
                text = " ".join(str(e).split()) or type(e).__name__
                kind = "" if isinstance(e, CliError) else f"{type(e).__name__}: "
                hint = "" if isinstance(e, CliError) else " (-v for the traceback)"
                print(f"{prog}: error: {kind}{text}{hint}", file=sys.stderr)
                return 2 if isinstance(e, CliError) else 1
        return wrapper
    return deco
