"""rlk-convert under careless or hostile input (issue: fail closed, lose nothing): overlapping
source and destination, mixed or non-float dtypes, a tensor stored twice across shards, SIGTERM
mid-write, temp directories of killed runs, an old destination that cannot be removed."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

from rlk_models.conversion import ConversionError, convert

from .test_convert import leftovers, tensors


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("where", ["dst_inside_src", "src_inside_dst"])
def test_overlapping_source_and_destination_are_refused_and_nothing_is_deleted(checkpoints, tmp_path, where):
    outer = _copy(checkpoints["qwen3"][0], tmp_path / "outer")
    sibling = tmp_path / "sibling"
    sibling.mkdir()
    (sibling / "keep.txt").write_text("mine")
    if where == "dst_inside_src":
        src, dst = outer, outer / "converted"
    else:
        inner = _copy(checkpoints["qwen3"][0], outer / "inner")
        src, dst = inner, outer
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(ConversionError, match="overlap"):
        convert(src, dst, force=True, progress=False)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def _rewrite(ckpt, fn):
    """Apply ``fn(dict of tensors) -> dict`` to the checkpoint's single safetensors file."""
    f = next(ckpt.glob("*.safetensors"))
    save_file(fn(load_file(f)), str(f), metadata={"format": "pt"})


@pytest.mark.parametrize("case", ["mixed_float", "integer"])
def test_mixed_or_non_float_dtypes_are_refused(checkpoints, tmp_path, case):
    src = _copy(checkpoints["qwen3"][0], tmp_path / "src")
    name = "model.layers.0.self_attn.k_proj.weight"

    def edit(sd):
        sd[name] = sd[name].float() if case == "mixed_float" else sd[name].to(torch.int8)
        return sd

    _rewrite(src, edit)
    with pytest.raises(ConversionError, match="one floating dtype.*" + ("F32" if case == "mixed_float" else "I8")):
        convert(src, tmp_path / "out", progress=False)
    assert leftovers(tmp_path, {"src"}) == []


def test_a_tensor_stored_twice_across_shards_is_refused(checkpoints, tmp_path):
    src = _copy(checkpoints["qwen3"][0], tmp_path / "src")
    name = "model.norm.weight"
    single = src / "model.safetensors"
    sd = load_file(single)
    single.unlink()
    names = sorted(sd)
    half = {"a": names[: len(names) // 2], "b": names[len(names) // 2:]}
    for part, keys in half.items():  # the norm weight goes into both shards, with different values
        save_file({k: sd[k] for k in keys} | {name: sd[name] * (2 if part == "b" else 1)},
                  str(src / f"model-{part}.safetensors"), metadata={"format": "pt"})
    weight_map = {k: f"model-{p}.safetensors" for p, keys in half.items() for k in keys}
    (src / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    with pytest.raises(ConversionError, match=f"tensor '{name}' is stored twice"):
        convert(src, tmp_path / "out", progress=False)


def test_sigterm_mid_conversion_leaves_nothing_and_stale_temp_dirs_are_cleaned(checkpoints, tmp_path):
    src = checkpoints["qwen3"][0]
    stale = tmp_path / ".out.tmp-deadbeef"  # what a SIGKILLed run leaves
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"partial")
    code = ("import importlib, time\n"
            "c = importlib.import_module('rlk_models.conversion.convert')\n"
            "real = c._write_shards\n"
            "def slow(*a, **k):\n"
            "    real(*a, **k); print('written', flush=True); time.sleep(60)\n"
            "c._write_shards = slow\n"
            f"c.convert({str(src)!r}, {str(tmp_path / 'out')!r}, progress=False)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.stdout.readline().strip() == "written"  # the shards are in the temp dir now
    assert not stale.exists(), "the killed run's temp dir was not cleaned at the next start"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.tmp-")], "no temp dir while writing"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) != 0
    time.sleep(0.2)
    assert leftovers(tmp_path, set()) == [], "SIGTERM left files behind"


def test_force_whose_old_destination_cannot_be_removed_says_so(checkpoints, tmp_path, monkeypatch):
    hf = checkpoints["qwen3"][0]
    dst = convert(hf, tmp_path / "out", progress=False)
    real_rmtree = shutil.rmtree

    def failing_rmtree(path, *a, **k):
        if ".out.old-" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_rmtree(path, *a, **k)

    monkeypatch.setattr(shutil, "rmtree", failing_rmtree)
    with pytest.raises(ConversionError, match="could not be removed"):
        convert(hf, dst, force=True, progress=False)
    monkeypatch.undo()
    assert tensors(dst).keys() == tensors(checkpoints["qwen3"][1]).keys()  # the new destination is complete
