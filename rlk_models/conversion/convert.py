"""Checkpoint conversion: transformers Qwen3/Llama <-> rlk, streamed tensor by tensor.

``convert(src, dst, to="rlk"|"hf")`` validates everything it can before writing a byte
(config fields, the exact tensor set and every shape, read from safetensors headers), then
streams: each output shard is assembled from lazily read source tensors, written, and dropped,
so a model never sits in RAM twice. Output goes to a temporary sibling directory that is
renamed into place at the end; on any error it is removed, and an existing ``dst`` is only
replaced with ``force=True``. Pickle ``.bin`` weights are refused unless ``allow_pickle``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm.auto import tqdm

from ..families import FAMILIES, Family, by_hf_model_type, by_model_type
from ..modeling.config import UnsupportedConfig, validate_config
from ..ops import BackendUnavailable
from ..ops.fingerprint import expected_fingerprint
from .maps import FUSED, IGNORED_SUFFIXES, hf_tensor_shapes, hf_to_rlk_plan

DEFAULT_MAX_SHARD_BYTES = 2 * 1024**3
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")


class ConversionError(ValueError):
    pass


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConversionError(f"{path}: not found") from None
    except (OSError, ValueError) as e:
        raise ConversionError(f"{path}: unreadable JSON ({e})") from None


def _config_for(raw: dict, to: str) -> tuple[Family, object]:
    """The family and the rlk config object describing ``raw`` (an HF or rlk config.json dict)."""
    mt = raw.get("model_type")
    family = by_hf_model_type(mt) if to == "rlk" else by_model_type(mt)
    if family is None and to == "rlk":
        raise ConversionError(f"unsupported architecture: model_type {mt!r} "
                              f"(supported: {sorted(f.hf_model_type for f in FAMILIES.values())})")
    if family is None:
        raise ConversionError(f"not an rlk checkpoint: model_type {mt!r} "
                              f"(expected one of {sorted(f.model_type for f in FAMILIES.values())})")
    cfg_cls = family.config_cls
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "transformers_version")}
    try:
        cfg = cfg_cls(**fields)
        validate_config(cfg)
    except UnsupportedConfig as e:
        raise ConversionError(str(e)) from None
    except (TypeError, ValueError) as e:
        raise ConversionError(f"invalid config.json: {e}") from None
    return family, cfg


class _Source:
    """Lazy reader over a checkpoint's weight files: name -> (file, shape, dtype)."""

    def __init__(self, src: Path, allow_pickle: bool):
        self.entries: dict[str, tuple[Path, tuple[int, ...]]] = {}
        self.dtypes: dict[str, str] = {}
        self._pickled: dict[str, torch.Tensor] = {}
        index, single = src / "model.safetensors.index.json", src / "model.safetensors"
        if index.exists():
            files = sorted({src / f for f in _read_json(index).get("weight_map", {}).values()})
        elif single.exists():
            files = [single]
        else:
            files = sorted(src.glob("*.safetensors"))
        if files:
            for f in files:
                try:
                    with safe_open(f, framework="pt") as h:
                        for k in h.keys():
                            self._add(k, f, tuple(h.get_slice(k).get_shape()), h.get_slice(k).get_dtype())
                except FileNotFoundError:
                    raise ConversionError(f"{f}: listed in the index but missing") from None
                except Exception as e:  # safetensors raises its own error types for corrupt headers
                    raise ConversionError(f"{f}: unreadable safetensors file ({e})") from None
            return
        bins = sorted(src.glob("*.bin"))
        if not bins:
            raise ConversionError(f"{src}: no weights found (*.safetensors or *.bin)")
        if not allow_pickle:
            raise ConversionError(f"{src}: weights are pickle .bin files ({bins[0].name}); loading them can run "
                                  "arbitrary code. Convert them to safetensors, or pass allow_pickle=True "
                                  "(--allow-pickle) if you trust the source")
        for f in bins:
            try:
                sd = torch.load(f, map_location="cpu", weights_only=True)
            except Exception as e:
                raise ConversionError(f"{f}: unreadable pickle checkpoint ({e})") from None
            for k, t in sd.items():
                self._add(k, f, tuple(t.shape), str(t.dtype).removeprefix("torch."))
                self._pickled[k] = t

    def _add(self, name: str, f: Path, shape: tuple[int, ...], dtype: str) -> None:
        if name in self.entries:  # safetensors forbids it within a file; across shards the last would win
            raise ConversionError(f"tensor {name!r} is stored twice: in {self.entries[name][0].name} and {f.name}")
        self.entries[name] = (f, shape)
        self.dtypes[name] = dtype

    def check_dtypes(self) -> str:
        """The one floating dtype of every tensor; mixed or non-float dtypes are refused (a fused
        tensor would be upcast, and the fingerprint records one dtype)."""
        kinds = {d: sorted(n for n, dd in self.dtypes.items() if dd == d) for d in set(self.dtypes.values())}
        floats = {"F32", "F16", "BF16", "F64", "float32", "float16", "bfloat16", "float64"}
        bad = [d for d in kinds if d not in floats]
        if bad or len(kinds) > 1:
            detail = "; ".join(f"{d}: {', '.join(ns[:4])}{' ...' if len(ns) > 4 else ''} ({len(ns)})"
                               for d, ns in sorted(kinds.items()))
            raise ConversionError(f"the checkpoint's tensors must share one floating dtype; found {detail}")
        return next(iter(kinds), "")

    def get(self, name: str) -> torch.Tensor:
        if name in self._pickled:
            return self._pickled[name]
        f, _ = self.entries[name]
        with safe_open(f, framework="pt") as h:
            return h.get_tensor(name)

    def nbytes(self, name: str) -> int:
        _, shape = self.entries[name]
        if name in self._pickled:
            return self._pickled[name].numel() * self._pickled[name].element_size()
        dtype = self.dtypes[name]  # recorded from the header when the file was indexed
        size = {"F64": 8, "F32": 4, "I64": 8, "I32": 4, "BF16": 2, "F16": 2, "I16": 2, "I8": 1, "U8": 1,
                "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}.get(dtype, 4)
        n = 1
        for s in shape:
            n *= s
        return n * size


def _check_tensors(src: _Source, expected: dict[str, tuple[int, ...]], what: str) -> None:
    present = {k for k in src.entries if not k.endswith(IGNORED_SUFFIXES)}
    missing = sorted(set(expected) - present)
    unexpected = sorted(present - set(expected))
    if missing:
        raise ConversionError(f"missing tensor(s) in {what}: {', '.join(missing[:5])}"
                              + (f" (+{len(missing) - 5} more)" if len(missing) > 5 else ""))
    if unexpected:
        tied = "lm_head.weight" in unexpected
        hint = " (tie_word_embeddings is true, so lm_head.weight must be absent)" if tied else ""
        raise ConversionError(f"unexpected tensor(s) in {what}: {', '.join(unexpected[:5])}"
                              + (f" (+{len(unexpected) - 5} more)" if len(unexpected) > 5 else "") + hint)
    for k, shape in expected.items():
        if src.entries[k][1] != tuple(shape):
            raise ConversionError(f"wrong shape for tensor {k}: {list(src.entries[k][1])}, "
                                  f"config implies {list(shape)}")


Step = tuple[str, tuple[str, ...], "tuple[list[int], int] | None"]


def _plan(to: str, cfg) -> tuple[dict[str, tuple[int, ...]], list[Step]]:
    """(expected source tensors and shapes, steps). A step is (output name, source names,
    split): sources are concatenated along dim 0, or, with split (sizes, i), the single
    source is cut into ``sizes`` and part i kept."""
    hf_shapes = hf_tensor_shapes(cfg)
    fuse = hf_to_rlk_plan(cfg)
    if to == "rlk":
        return hf_shapes, [(out, srcs, None) for out, srcs in fuse.items()]
    rlk_shapes = {out: (sum(hf_shapes[s][0] for s in srcs), *hf_shapes[srcs[0]][1:]) for out, srcs in fuse.items()}
    steps: dict[str, Step] = {}
    for out, srcs in fuse.items():
        sizes = [hf_shapes[s][0] for s in srcs]
        for i, s in enumerate(srcs):
            steps[s] = (s, (out,), (sizes, i) if len(srcs) > 1 else None)
    return rlk_shapes, [steps[name] for name in hf_shapes]


def _shard_names(n: int) -> list[str]:
    if n == 1:
        return ["model.safetensors"]
    return [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]


def convert(src: str | os.PathLike, dst: str | os.PathLike, to: str = "rlk", *, force: bool = False,
            allow_pickle: bool = False, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
            rlk_backend: str | None = None, progress: bool = True) -> Path:
    """Convert checkpoint directory ``src`` into ``dst`` (``to='rlk'`` from transformers,
    ``to='hf'`` back). Returns ``dst``. Raises ``ConversionError`` naming the problem; on error
    nothing is left at ``dst`` (an existing ``dst`` is untouched)."""
    if to not in ("rlk", "hf"):
        raise ConversionError(f"to must be 'rlk' or 'hf', got {to!r}")
    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise ConversionError(f"{src}: not a checkpoint directory")
    s_abs, d_abs = src.resolve(), dst.resolve()
    if d_abs == s_abs or s_abs in d_abs.parents or d_abs in s_abs.parents:
        raise ConversionError(f"source {src} and destination {dst} overlap (one is inside the other); "
                              "--force would delete the source")
    if dst.exists() and not force:
        raise ConversionError(f"{dst} exists; pass force=True (--force) to replace it")
    raw = _read_json(src / "config.json")
    family, cfg = _config_for(raw, to)
    source = _Source(src, allow_pickle)
    expected, steps = _plan(to, cfg)
    _check_tensors(source, expected, f"{src} ({family.name}, {'HF' if to == 'rlk' else 'rlk'} layout)")
    source.check_dtypes()
    # sizes are known from headers, so shards are planned before anything is read
    out_bytes = [sum(source.nbytes(s) for s in srcs) if split is None else
                 source.nbytes(srcs[0]) * split[0][split[1]] // sum(split[0])
                 for _, srcs, split in steps]
    shards = _plan_shards(out_bytes, max_shard_bytes)

    dst.parent.mkdir(parents=True, exist_ok=True)
    for stale in dst.parent.glob(f".{dst.name}.tmp-*"):  # left by a run that was killed (SIGKILL)
        shutil.rmtree(stale, ignore_errors=True)
    with _terminate_as_exception():
        tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.tmp-", dir=dst.parent))
        try:
            _write_shards(tmp, source, steps, shards, sum(out_bytes), f"convert -> {to}", progress)
            weights_dtype = source.get("model.embed_tokens.weight").dtype
            out_config = _out_config(raw, family, to, rlk_backend, weights_dtype)
            (tmp / "config.json").write_text(json.dumps(out_config, indent=2) + "\n")
            for f in src.iterdir():  # tokenizer, generation config, chat template, ...
                if f.is_file() and f.name != "config.json" and not _is_weight_file(f):
                    shutil.copy2(f, tmp / f.name)
            _replace(tmp, dst)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return dst


@contextlib.contextmanager
def _terminate_as_exception():
    """SIGTERM (a job scheduler's kill) raises in the main thread, so the temporary directory is
    removed on the way out like on any other error."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(f"rlk-convert: terminated by signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _plan_shards(out_bytes: list[int], max_shard_bytes: int) -> list[list[int]]:
    """Output tensors (by index, in order) grouped into shards of at most ``max_shard_bytes``."""
    shards: list[list[int]] = [[]]
    size = 0
    for i, nb in enumerate(out_bytes):
        if shards[-1] and size + nb > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(i)
        size += nb
    return shards


def _write_shards(tmp: Path, source, steps, shards: list[list[int]], total: int, desc: str, progress: bool) -> None:
    """Stream the planned tensors into safetensors shards in ``tmp`` (+ the index if several)."""
    names = _shard_names(len(shards))
    weight_map = {}
    with tqdm(total=len(steps), desc=desc, unit="tensor", disable=not progress) as bar:
        for shard_name, idxs in zip(names, shards):
            tensors = {}
            for i in idxs:
                name, srcs, split = steps[i]
                if split is None:
                    parts = [source.get(s) for s in srcs]
                    t = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
                else:
                    sizes, j = split
                    t = source.get(srcs[0]).split(sizes, dim=0)[j]
                tensors[name] = t.contiguous()
                weight_map[name] = shard_name
                bar.update(1)
            save_file(tensors, str(tmp / shard_name), metadata={"format": "pt"})
            del tensors
    if len(names) > 1:
        (tmp / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))


def _is_weight_file(f: Path) -> bool:
    return f.name in _WEIGHT_FILES or f.suffix in (".safetensors", ".bin") or f.name.endswith(".index.json")


def _out_config(raw: dict, family: Family, to: str, rlk_backend: str | None, weights_dtype: torch.dtype) -> dict:
    out = dict(raw)
    if to == "rlk":
        out["model_type"] = family.model_type
        out["architectures"] = [family.architecture]
        out["rlk_backend"] = rlk_backend or raw.get("rlk_backend", "reference")
        try:
            out["rlk_fingerprint"] = expected_fingerprint(out["rlk_backend"], weights_dtype)
        except BackendUnavailable as e:
            raise ConversionError(str(e)) from None
    else:
        out["model_type"] = family.hf_model_type
        out["architectures"] = [family.hf_architecture]
        for k in [k for k in out if k.startswith("rlk_")]:
            del out[k]
    return out


def _replace(tmp: Path, dst: Path) -> None:
    """Move the finished ``tmp`` to ``dst``; an old ``dst`` is removed only after the swap."""
    if not dst.exists():
        os.replace(tmp, dst)
        return
    old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
    os.replace(dst, old)
    try:
        os.replace(tmp, dst)
    except BaseException:
        os.replace(old, dst)
        raise
    try:
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    except OSError as e:
        raise ConversionError(f"wrote {dst}, but the old destination, moved aside to {old}, could not be removed "
                              f"({e}); remove it by hand") from None


__all__ = ["ConversionError", "FUSED", "convert"]
