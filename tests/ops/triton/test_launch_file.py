"""Matmul launch files (``matmul.use_launches``, ``RLK_MATMUL_LAUNCHES``): launches measured on the GPU at hand, over
the built-in tables. A file may change which launch runs, never the bits; a bad file is refused whole, with the
entry and what is wrong named, and a write never leaves a half-written file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from rlk_models.ops.triton import matmul as mm  # noqa: E402

from .test_kernels import NATIVE, bitwise_data, pytestmark  # noqa: E402, F401 (the interpreter's skip)

# a row-parallel product in the canonical K-groups (K = 1024: 8 groups of 2 K-tiles), and a plain one
GROUPS_KEY, PLAIN_KEY = ("groups", 48, 1024), ("plain", 96, 256)


def entry(key, rows, launch: mm.Launch, **extra) -> dict:
    kind, n, k = key
    return {"kind": kind, "n": n, "k": k, "rows": list(rows), "launch": mm.launch_json(launch), **extra}


@pytest.fixture
def builtin_tables():
    """Every test leaves the process on the built-in tables, as it found it."""
    assert not mm.FILE_LAUNCHES
    yield
    mm.use_launches(None)


def test_launch_file_routes_its_rows_and_keeps_the_bits(tmp_path, builtin_tables):
    split = mm.Launch((16, 32, 4, 4), split=1)
    swap = mm.Launch((64, 16, 4, 6), swap=True)
    path = tmp_path / "launches.json"
    mm.save_launches(path, [entry(GROUPS_KEY, (2, 5), split, layer="o"), entry(PLAIN_KEY, (1, 3), swap)],
                     {"device": "test"})
    g = torch.Generator().manual_seed(0)
    xg, wg = bitwise_data(g, 8, 1024), bitwise_data(g, 48, 1024, scale=0.5)
    xp, wp = bitwise_data(g, 8, 256), bitwise_data(g, 96, 256, scale=0.5)
    builtin = {m: mm.launch_for(m, 48, 8, 1024) for m in range(1, 9)}
    want = {m: (mm.matmul(xg[:m], wg, row_parallel=True), mm.matmul(xp[:m], wp)) for m in range(1, 9)}
    assert split not in builtin.values()

    table = mm.use_launches(path)
    assert table == {GROUPS_KEY: [(2, 5, split)], PLAIN_KEY: [(1, 3, swap)]}
    for m in range(1, 9):
        assert mm.launch_for(m, 48, 8, 1024) == (split if 2 <= m <= 5 else builtin[m]), m
        assert (mm.launch_for(m, 96, 1, 256) == swap) == (m <= 3), m
        got = (mm.matmul(xg[:m], wg, row_parallel=True), mm.matmul(xp[:m], wp))
        assert torch.equal(got[0], want[m][0]) and torch.equal(got[1], want[m][1]), f"M={m}: the file changed bits"
    assert mm.launch_for(4, 48, 1, 1024) != split, "a K-groups entry is not the plain product's"
    mm.use_launches(None)
    assert mm.launch_for(3, 48, 8, 1024) == builtin[3]


def test_save_launches_replaces_overlapping_rows_and_keeps_the_rest(tmp_path, builtin_tables):
    path = tmp_path / "launches.json"
    a, b, c = mm.Launch((16, 32, 4, 4), split=1), mm.Launch((64, 64, 4, 4)), mm.Launch((16, 64, 4, 4), split=mm.HALF)
    mm.save_launches(path, [entry(GROUPS_KEY, (1, 4), a), entry(GROUPS_KEY, (9, 16), b)])
    # one shape measured twice in one search (o and down where the intermediate size is the hidden size): the last
    kept = mm.save_launches(path, [entry(GROUPS_KEY, (3, 8), a, layer="o"),
                                   entry(GROUPS_KEY, (3, 8), c, layer="down", measured={"us": 1.0})],
                            {"device": "test"})
    assert [(e["rows"], mm.Launch(**{**e["launch"], "config": tuple(e["launch"]["config"])})) for e in kept] == [
        ([3, 8], c), ([9, 16], b)]
    doc = json.loads(path.read_text())
    assert doc["format"] == mm.LAUNCH_FILE_FORMAT and doc["device"] == "test"
    assert mm.load_launches(path) == {GROUPS_KEY: [(3, 8, c), (9, 16, b)]}
    # an entry the loader refuses: nothing written, the file as it was, no temporary left behind
    before = path.read_text()
    with pytest.raises(ValueError, match=f"{path}: launches\\[0\\]: config .* is not in CANDIDATE_CONFIGS"):
        mm.save_launches(path, [entry(GROUPS_KEY, (1, 2), mm.Launch((48, 48, 4, 4)))])
    assert path.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["launches.json"]
    # a file there that is not a launch file is refused, not overwritten
    other = tmp_path / "other.json"
    other.write_text('{"some": "config"}')
    with pytest.raises(ValueError, match=f"{other}: not a launch file"):
        mm.save_launches(other, [entry(GROUPS_KEY, (1, 2), a)])
    assert other.read_text() == '{"some": "config"}'


def test_save_launches_leaves_the_old_file_when_the_write_fails(tmp_path, builtin_tables, monkeypatch):
    """A write that fails part-way (a full disk) leaves the file as it was and no temporary beside it."""
    path = tmp_path / "launches.json"
    mm.save_launches(path, [entry(GROUPS_KEY, (1, 4), mm.Launch((64, 64, 4, 4)))])
    before = path.read_text()
    real = Path.write_text

    def half_then_full(self, text, *args, **kwargs):  # writes half the text, then the disk is full
        real(self, text[: len(text) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", half_then_full)
    with pytest.raises(OSError, match="No space left"):
        mm.save_launches(path, [entry(GROUPS_KEY, (9, 16), mm.Launch((16, 32, 4, 4), split=1))])
    monkeypatch.undo()
    assert path.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["launches.json"]
    assert mm.load_launches(path) == {GROUPS_KEY: [(1, 4, mm.Launch((64, 64, 4, 4)))]}


@pytest.mark.parametrize("doc, says", [
    ("not json", "cannot read it"),
    ({"launches": []}, "not a launch file"),
    ({"format": mm.LAUNCH_FILE_FORMAT, "launches": [{"kind": "plain", "n": 96, "k": 256, "rows": [1, 2]}]},
     r"launches\[0\]: missing field\(s\) \['launch'\]"),
    ({"format": mm.LAUNCH_FILE_FORMAT, "launches": [{**entry(PLAIN_KEY, (1, 2), mm.Launch((64, 64, 4, 4))),
                                                     "tiles": 3}]}, r"unknown field\(s\) \['tiles'\]"),
    ({"format": mm.LAUNCH_FILE_FORMAT, "launches": [entry(PLAIN_KEY, (3, 2), mm.Launch((64, 64, 4, 4)))]},
     r"rows \[3, 2\]"),
    ({"format": mm.LAUNCH_FILE_FORMAT, "launches": [{**entry(PLAIN_KEY, (1, 2), mm.Launch((64, 64, 4, 4))),
                                                     "launch": {"config": [64, 64, 4, 4], "stages": 3}}]},
     r"unknown launch field\(s\) \['stages'\]"),
    ({"format": mm.LAUNCH_FILE_FORMAT, "launches": [{**entry(PLAIN_KEY, (1, 2), mm.Launch((64, 64, 4, 4))),
                                                     "launch": {"config": [64, 64, 4, 4], "swap": 1}}]},
     "launch field 'swap' is 1; expected a bool"),
    ({"format": mm.LAUNCH_FILE_FORMAT, "launches": [entry(("groups", 48, 960), (1, 2), mm.Launch((64, 64, 4, 4)))]},
     "K=960 has no canonical K-groups"),
    ({"format": mm.LAUNCH_FILE_FORMAT, "launches": [entry(PLAIN_KEY, (1, 2), mm.Launch((64, 64, 4, 4), split=1))]},
     "in K-groups only"),
    ({"format": mm.LAUNCH_FILE_FORMAT, "launches": [entry(GROUPS_KEY, (1, 2), mm.Launch((64, 16, 4, 6), swap=True))]},
     "plain K only"),
    ({"format": mm.LAUNCH_FILE_FORMAT, "launches": [entry(PLAIN_KEY, (1, 2), mm.Launch((64, 64, 4, 4), block_k=96))]},
     "block_k 96"),
    ({"format": mm.LAUNCH_FILE_FORMAT, "launches": [entry(GROUPS_KEY, (1, 2),
                                                          mm.Launch((128, 256, 12, 3), sm90=True))]},
     r"sm90 config \(128, 256, 12, 3\) is none of the proven Gluon forms"),
    ({"format": mm.LAUNCH_FILE_FORMAT, "launches": [entry(GROUPS_KEY, (1, 2),
                                                          mm.Launch((128, 128, 12, 5), sm90=True, block_k=256))]},
     "sm90 K slots 256 wide"),
    ({"format": mm.LAUNCH_FILE_FORMAT, "launches": [entry(GROUPS_KEY, (1, 4), mm.Launch((64, 64, 4, 4))),
                                                    entry(GROUPS_KEY, (4, 9), mm.Launch((64, 128, 4, 4)))]},
     r"launches\[1\]: rows 4-9 overlap rows 1-4"),
])
def test_load_launches_names_what_is_wrong_and_changes_nothing(tmp_path, doc, says, builtin_tables):
    path = tmp_path / "launches.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(ValueError, match=says) as e:
        mm.use_launches(path)
    assert str(path) in str(e.value)
    assert not mm.FILE_LAUNCHES


def test_packaged_device_launch_files_load_and_name_their_gpu():
    """Every GPU model's launch file shipped in the package passes ``load_launches`` and is named after the GPU its
    ``device`` field names, so ``use_device_launches`` finds it on that GPU and on no other."""
    files = sorted(mm.DEVICE_LAUNCH_DIR.glob("*.json"))
    assert files, f"no device launch files in {mm.DEVICE_LAUNCH_DIR}"
    for path in files:
        assert mm.load_launches(path), f"{path}: no launches"
        assert mm.device_launch_file(json.loads(path.read_text())["device"]) == path


def test_device_launch_file_sits_over_the_tables_and_under_a_users_file(tmp_path, builtin_tables, monkeypatch):
    """``use_device_launches(name)``: the packaged file of GPU model ``name`` routes its rows (over ``TUNED`` and the
    tables), a user's file routes its own rows over it, another GPU model's process runs the built-in tables, and
    none of it changes the bits. A file whose ``device`` is not the GPU its name makes it is refused."""
    monkeypatch.setattr(mm, "DEVICE_LAUNCH_DIR", tmp_path)
    split, plain = mm.Launch((16, 32, 4, 4), split=1), mm.Launch((32, 64, 4, 4))
    mm.save_launches(mm.device_launch_file("Test GPU 80GB"), [entry(GROUPS_KEY, (2, 5), split)],
                     {"device": "Test GPU 80GB"})
    assert mm.device_launch_file("Test GPU 80GB").name == "Test_GPU_80GB.json"
    g = torch.Generator().manual_seed(1)
    x, w = bitwise_data(g, 8, 1024), bitwise_data(g, 48, 1024, scale=0.5)
    builtin = {m: mm.launch_for(m, 48, 8, 1024) for m in range(1, 9)}
    want = {m: mm.matmul(x[:m], w, row_parallel=True) for m in range(1, 9)}
    assert split not in builtin.values() and plain not in builtin.values()
    try:
        assert mm.use_device_launches("Test GPU 80GB") == {GROUPS_KEY: [(2, 5, split)]}
        user = tmp_path / "mine.json"
        mm.save_launches(user, [entry(GROUPS_KEY, (4, 6), plain)])
        mm.use_launches(user)
        for m in range(1, 9):
            lc = mm.launch_for(m, 48, 8, 1024)
            assert lc == (plain if 4 <= m <= 6 else split if 2 <= m <= 3 else builtin[m]), m
            assert torch.equal(mm.matmul(x[:m], w, row_parallel=True), want[m]), f"M={m}: the files changed bits"
        mm.use_launches(None)
        assert mm.launch_for(4, 48, 8, 1024) == split
        assert mm.use_device_launches("Other GPU") == {} and mm.launch_for(4, 48, 8, 1024) == builtin[4]
        mm.save_launches(mm.device_launch_file("Renamed GPU"), [entry(GROUPS_KEY, (2, 5), split)],
                         {"device": "Test GPU 80GB"})
        with pytest.raises(ValueError, match="'Test GPU 80GB', not 'Renamed GPU'"):
            mm.use_device_launches("Renamed GPU")
    finally:
        mm.use_device_launches(None)
    assert not mm.DEVICE_LAUNCHES


def test_every_builtin_launch_is_a_form_a_file_may_name():
    """The tables' own launches pass ``launch_problem``: a file may write down any launch the package runs by
    default (and the GPU tests prove)."""
    for (kind, *_), table in (*mm.LAUNCHES.items(), *mm.TUNED.items()):
        for _, lc in table:
            if lc is not None:
                assert mm.launch_problem(lc, kind) == "", (kind, lc)
    for lc in (*mm.SM90_PLAIN_CANDIDATES, mm.SM90_TAIL):
        assert mm.launch_problem(lc, "plain") == ""
        assert mm.launch_problem(lc._replace(block_k=2 * mm.BLOCK_K), "plain") == ""


@pytest.mark.skipif(NATIVE, reason="a subprocess on the CPU interpreter suffices")
def test_the_environment_variable_loads_the_file_at_import(tmp_path):
    path = tmp_path / "launches.json"
    lc = mm.Launch((16, 32, 4, 4), split=1)
    mm.save_launches(path, [entry(GROUPS_KEY, (2, 5), lc)])
    code = ("from rlk_models.ops.triton import matmul as mm; "
            "print(mm.launch_for(3, 48, 8, 1024) == mm.Launch((16, 32, 4, 4), split=1), mm.launch_for(6, 48, 8, "
            "1024) == mm.Launch((16, 32, 4, 4), split=1))")
    env = {**os.environ, mm.LAUNCH_FILE_ENV: str(path), "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "False"]
    path.write_text(json.dumps({"format": "something else"}))
    bad = subprocess.run([sys.executable, "-c", "import rlk_models.ops.triton.matmul"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode != 0 and f"matmul launch file {path}: not a launch file" in bad.stderr



def test_mm_plans_a_shape_once_and_again_under_a_new_launch_file(tmp_path, builtin_tables):
    """``mm`` decides a shape's launch once (``_plan``, cached: the host's time per product is the launch's), and
    decides again when a launch file comes into use or goes (``_tables_version``), so no product keeps a launch of
    the tables before; the bits stay the built-in launch's."""
    split = mm.Launch((16, 32, 4, 4), split=1)
    path = tmp_path / "launches.json"
    mm.save_launches(path, [entry(GROUPS_KEY, (1, 8), split)], {"device": "test"})
    g = torch.Generator().manual_seed(0)
    x, w = bitwise_data(g, 4, 1024), bitwise_data(g, 48, 1024, scale=0.5)
    mm._plan.cache_clear()
    want = mm.matmul(x, w, row_parallel=True)
    assert torch.equal(mm.matmul(x, w, row_parallel=True), want)
    assert mm._plan.cache_info()[:2] == (1, 1)  # (hits, misses): one decision, reused
    mm.use_launches(path)
    assert torch.equal(mm.matmul(x, w, row_parallel=True), want)
    mm.use_launches(None)
    assert torch.equal(mm.matmul(x, w, row_parallel=True), want)
    assert mm._plan.cache_info()[:2] == (1, 3), "a launch file's arrival and departure each decide again"
