"""Warm starts (``rlk_models.ops.triton.precompile``): the variants a process compiles are recorded once, and a file
of them compiles ahead on threads into kernels that then run without compiling. The compiles are real (Triton's
compiler for sm_90, no GPU needed), in a child process: this suite's kernels run under ``TRITON_INTERPRET=1``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
from rlk_models.ops.triton import precompile  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def test_recorded_variants_compile_ahead_on_threads_and_are_not_compiled_again(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("precompile_child.py")),
                          str(tmp_path / "new_dir" / "kernels.jsonl"), str(tmp_path / "fresh_cache"), "2"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    first = sorted(map(tuple, r["first"]))
    # three kernels at two specializations each: six variants, each compiled once and recorded once
    assert len(first) == 6 and len(set(first)) == 6
    assert {k for k, _ in first} == {"_emb_bwd", "_mm_tma_kernel", "_mm_groups_ws"}
    assert r["lines"] == 6
    assert sorted((name.rsplit(".", 1)[1], key) for name, key in r["recorded"]) == first
    # replayed into a process with nothing compiled and an empty disk cache: every variant compiled ahead (not
    # loaded), the stale lines skipped by name, the repeated line once
    assert sorted(map(tuple, r["preloaded"])) == first
    assert r["fresh_cache_entries"] >= 6
    rep = r["report"]
    assert (rep["variants"], rep["compiled"], rep["workers"]) == (8, 6, 2)
    assert len(rep["skipped"]) == 2
    assert rep["skipped"][0].startswith("rlk_models.ops.triton.embedding._gone: LookupError")
    assert rep["skipped"][1].startswith("rlk_models.ops.triton.embedding._emb_bwd: ")
    # the launchers' calls then find every variant compiled
    assert r["after"] == []
    assert "already recording" in r["second_file"]


def test_a_kernel_file_is_checked_line_by_line(tmp_path):
    good = json.dumps({"name": "rlk_models.ops.triton.embedding._emb_bwd", "key": "k1", "signature": {}})
    path = tmp_path / "k.jsonl"
    path.write_text(f"{good}\n\n{good}\n" + good.replace("k1", "k2") + "\n")
    assert [json.loads(v.data)["key"] for v in precompile.read_variants(path)] == ["k1", "k2"]
    path.write_text(f"{good}\nnot json\n")
    with pytest.raises(ValueError, match=r"k.jsonl, line 2: not a kernel variant"):
        precompile.read_variants(path)
    path.write_text(json.dumps({"name": "rlk_models.x._k"}) + "\n")
    with pytest.raises(ValueError, match=r"line 1: not a kernel variant.*KeyError"):
        precompile.read_variants(path)
    path.write_text(good.replace("rlk_models.ops.triton.embedding", "os") + "\n")
    with pytest.raises(ValueError, match=r"line 1: kernel 'os._emb_bwd' is not one of rlk_models's"):
        precompile.read_variants(path)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        precompile.preload(tmp_path / "k.jsonl", workers=0)


def test_the_packaged_file_is_chosen_by_the_gpu_and_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(precompile.PRELOAD_ENV, raising=False)
    assert precompile.device_kernel_file("NVIDIA H200").name == "NVIDIA_H200.jsonl"
    assert precompile.preload_device_kernels("No Such GPU") is None  # no file for it: nothing to replay
    monkeypatch.setenv(precompile.PRELOAD_ENV, "0")
    assert precompile.preload_device_kernels("NVIDIA H200") is None
    monkeypatch.setenv(precompile.PRELOAD_ENV, str(tmp_path / "missing.jsonl"))
    with pytest.raises(FileNotFoundError, match="missing.jsonl: no such Triton kernel file"):
        precompile.preload_device_kernels("NVIDIA H200")


def test_the_command_names_what_it_cannot_compile(capsys):
    with pytest.raises(SystemExit):
        precompile.main(["--gpu", "No Such GPU"])
    assert "the package has no kernel file for 'No Such GPU'" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted(precompile.KERNEL_DIR.glob("*.jsonl")), ids=lambda p: p.stem)
def test_packaged_kernel_files_name_the_kernels_as_they_are(path):
    """A packaged file's every variant names a kernel of this package with its current parameters (a kernel changed
    since the file was recorded would compile at first use again: record the file anew)."""
    variants = precompile.read_variants(path)
    assert variants
    for v in variants:
        fn = precompile._kernel(v.kernel)  # the replay's own lookup: a kernel gone raises LookupError
        assert list(json.loads(v.data)["signature"]) == list(fn.arg_names), v.kernel
