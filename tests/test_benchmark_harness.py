"""The GPU benchmarks' timing helpers that run on any machine: the L2-cold copies and their rotation
(benchmarks/harness.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import harness  # noqa: E402


def test_l2_cold_copies_pass_twice_the_cache():
    w = torch.randn(64, 32)  # 8 KiB
    copies = harness.l2_cold_copies(w, l2_bytes=20_000)
    assert len(copies) == 5  # 5 x 8,192 B >= 2 x 20,000 B, 4 copies would not be
    assert copies[0] is w and all(torch.equal(c, w) and c.data_ptr() != w.data_ptr() for c in copies[1:])
    assert len(harness.l2_cold_copies(w, l2_bytes=10)) == 2  # a weight over the cache still alternates


def test_bench_graph_cold_calls_each_copy_in_turn(monkeypatch):
    seen = []

    def fake_bench_graph(fn, rep=50):  # do_bench_cudagraph calls fn once, then captures it again and again
        for _ in range(7):
            fn()
        return 1.0

    monkeypatch.setattr(harness, "bench_graph", fake_bench_graph)
    ops = [torch.zeros(1) for _ in range(3)]
    assert harness.bench_graph_cold(lambda op: seen.append(id(op)), ops) == 1.0
    assert seen == [id(ops[i % 3]) for i in range(7)]


def test_matmul_goal_counts_the_recorded_tables():
    """``matmul_sweep.py goal`` on recorded H200 tables gives the counts docs/benchmarks.md states for them
    (session 34's full table: 112 of 153, #17's grid 62 of 70; session 42's 1.7B table: 47 of 56, 36 before;
    session 45's rows at five shapes: 75 of 85; session 54's H100 table: 126 of 153, 63 of 70), and session 35's by
    the measured ratio."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "triton"))
    import matmul_sweep

    data = Path(__file__).resolve().parents[1] / "docs" / "data"
    s34 = matmul_sweep.goal(str(data / "matmul_sweep_2026-12-03-s34-table.json"))
    assert (s34["in_goal"], s34["points"], s34["issue_grid_in_goal"], s34["issue_grid"]) == (112, 153, 62, 70)
    # session 54's whole table (an H100) and its --layer run: products 49 of 68, layers 58 of 68
    s54 = matmul_sweep.goal(str(data / "matmul_table_2026-12-06-s54-h100.json"))
    assert (s54["in_goal"], s54["points"], s54["issue_grid_in_goal"], s54["issue_grid"]) == (126, 153, 63, 70)
    layer = str(data / "matmul_layer_2026-12-06-s54-h100.json")
    assert [(r["in_goal"], r["points"]) for r in (matmul_sweep.goal(layer), matmul_sweep.goal(layer, row="graph_layer"))
            ] == [(49, 68), (58, 68)]
    s42 = matmul_sweep.goal(str(data / "matmul_sweep_1.7b_2026-12-04-s42.json"),
                            str(data / "matmul_sweep_2026-12-03-s34-table.json"))
    assert (s42["in_goal"], s42["points"], s42["before_in_goal_at_these_points"], s42["issue_grid"]) == (47, 56, 36, 0)
    assert {(name, m) for name, m, _ in s42["misses"]} == {
        ("qkv_1.7b", 64), ("qkv_1.7b", 256), ("o_1.7b", 256), ("o_1.7b", 512), ("o_1.7b", 4096), ("o_1.7b", 8192),
        ("down_1.7b", 4096), ("down_1.7b", 8192), ("gate_up_1.7b", 256)}
    assert "| qkv_1.7b after | **0.99** |" in s42["table"]  # bold: entered the goal (session 34: 1.44x)
    # session 35's L2-hot and -cold rows: 58 and 65 of #17's 70 by the measured ratio (its note's 60 and 66 took
    # o and down at 8192 rows, 1.052-1.054x, as their display's 1.05x)
    s35 = data / "matmul_sweep_2026-12-04-s35-cold.json"
    assert [matmul_sweep.goal(str(s35), row=row)["issue_grid_in_goal"] for row in ("graph", "graph_cold")] == [58, 65]
    assert matmul_sweep.in_goal(4095, 1.15) and not matmul_sweep.in_goal(4096, 1.06)
    # session 45's graph rows at five shapes (qkv 8B not run): 75 of 85, 69 before; #17's grid at four shapes
    s45 = matmul_sweep.goal(str(data / "matmul_rows_2026-12-05-s45-call1.json"),
                            str(data / "matmul_sweep_2026-12-03-s34-table.json"))
    assert (s45["in_goal"], s45["points"], s45["before_in_goal_at_these_points"]) == (75, 85, 69)
    assert (s45["issue_grid_in_goal"], s45["issue_grid"]) == (52, 56)


def test_matmul_explain_lays_out_the_recorded_misses(tmp_path, capsys):
    """``matmul_sweep.py explain`` on session 45's rows: its 10 misses, each with the kernels ``matmul.grids`` gives
    its recorded launch (o 8B at 384 rows: 96 tiles of 128 x 128, three quarters of a wave; at 64 rows two parts of
    64 tiles and the fold), the bytes and FLOPs a second; and the kernels a ``--kernels`` run recorded."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "triton"))
    import matmul_sweep

    run = Path(__file__).resolve().parents[1] / "docs" / "data" / "matmul_rows_2026-12-05-s45-call1.json"
    rows = matmul_sweep.explain(str(run))
    assert [(r["layer"], r["m"]) for r in rows] == [
        ("o", 64), ("o", 384), ("o", 768), ("o", 4096), ("o", 8192), ("down", 768), ("down", 8192),
        ("gate_up", 192), ("qkv_1.7b", 4), ("qkv_1.7b", 384)]
    o64, o384 = rows[0], rows[1]
    assert [(g["form"], g["tile"], g["tiles"], g["programs"]) for g in o384["grids"]] == [("gluon", (128, 128), 96, 96)]
    assert [(g["form"], g["tiles"]) for g in o64["grids"]] == [("triton", 128), ("fold", 256)]
    assert o64["flops"] == 2 * 64 * 4096 * 4096 and o64["weight_in_l2"]
    # bytes: x, w and out in bf16, and the two fp32 partials written and read
    assert o64["bytes"] == 2 * (64 * 4096 * 2 + 4096 * 4096) + 8 * 2 * 64 * 4096
    assert o64["tb_s"]["ours"] == pytest.approx(o64["bytes"] / (o64["us"]["ours"] * 1e-6) / 1e12)
    assert len(matmul_sweep.explain(str(run), every=True)) == 85
    # a --kernels run's kernels; a shape named in the run (k, n) though not in SHAPES
    mine = {"shapes": {"mine": {"k": 1024, "n": 512, "row_parallel": False, "graph": {"8": {
        "cublas_ms": 0.004, "ours_ms": 0.005, "ratio": 1.25, "launch": "Launch(config=(64, 16, 4, 8), swap=True)",
        "cublas_kernels": ["nvjet_hsh_64x8_64x16_2x1_v_bz_TNT"], "ours_kernels": ["_mm_tma_kernel"]}}}}}
    (tmp_path / "run.json").write_text(json.dumps(mine))
    [row] = matmul_sweep.explain(str(tmp_path / "run.json"))
    assert row["cublas_kernels"] == ["nvjet_hsh_64x8_64x16_2x1_v_bz_TNT"]
    assert [(g["tile"], g["tiles"]) for g in row["grids"]] == [((16, 64), 8)]  # swap: 8 tokens x 64 weight rows
    with pytest.raises(ValueError, match="not a Launch"):
        matmul_sweep.parse_launch("__import__('os')")
    # the peaks are the run's GPU's: an H100 run is not read against the H200's HBM
    h100 = matmul_sweep.Peaks("H100 SXM", 3.35, 989.0, 132, 50)
    assert matmul_sweep.peaks_of("NVIDIA H100 80GB HBM3") == (h100, True)
    assert matmul_sweep.peaks_of("NVIDIA H200")[0].tb_s == 4.8
    assert matmul_sweep.peaks_of("NVIDIA A100-SXM4-80GB") == (matmul_sweep.peaks_of("NVIDIA H200")[0], False)
    mine["info"] = {"gpu": "NVIDIA H100 80GB HBM3"}
    (tmp_path / "run.json").write_text(json.dumps(mine))
    matmul_sweep.explain(str(tmp_path / "run.json"))
    assert "run on NVIDIA H100 80GB HBM3; H100 SXM's figures: 3.35 TB/s" in capsys.readouterr().out


def test_matmul_search_gives_the_gluon_form_only_its_proven_slot_widths():
    """``--block-k 128,256``: every Triton candidate at both loads, the Gluon form (``Launch.sm90``) at 128 only --
    its 256-wide slot fits twice in a 64-row tile, but it was never built (gluon_sass.py) nor proven on the GPU --
    and only where two 128-wide slots fit."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "triton"))
    import matmul_sweep

    launches = matmul_sweep.candidates(192, grouped=False, block_ks=[128, 256])
    widths = {(lc.sm90, lc.block_k) for lc in launches}
    assert widths == {(False, 128), (False, 256), (True, 128)}, widths
    # every Gluon candidate but 128 x 256 and 192 x 192, whose 128-wide slots (96 KiB) fit once beside their output
    # tiles: matmul refuses those launches, so the search would only print a skip (session 45)
    assert {lc._replace(block_k=64) for lc in launches if lc.sm90} == {
        lc for lc in matmul_sweep.SM90_PLAIN_CANDIDATES if lc.config[:2] not in ((128, 256), (192, 192))}
    # the row-parallel layers (K-groups): the grouped Gluon forms, their default from 129 rows, weighed as well
    grouped = matmul_sweep.candidates(384, grouped=True, block_ks=[64, 128])
    assert {lc._replace(block_k=64) for lc in grouped if lc.sm90} == set(matmul_sweep.SM90_CANDIDATES)
    assert matmul_sweep.launch_for(384, 4096, 8, 4096) in grouped  # o 8B's default at 384 rows
    assert not any(lc.sm90 for lc in matmul_sweep.candidates(64, grouped=True))


def test_matmul_retime_rotates_the_order_each_round():
    """``retime``: every name timed once a round, each round starting one name later, so a drift over the rounds
    spreads over the names instead of falling on the last ones; the median of its runs picks the best."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "triton"))
    import matmul_sweep

    order = []
    fns = {name: (lambda name=name: name) for name in ("a", "b", "c")}
    clock = iter(range(100))

    def fake_bench(fn):  # the time is the call's place in the whole sequence: a steady drift
        order.append(fn())
        return float(next(clock))

    runs = matmul_sweep.retime(fns, 4, bench=fake_bench)
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert runs == {"a": [0.0, 5.0, 7.0, 9.0], "b": [1.0, 3.0, 8.0, 10.0], "c": [2.0, 4.0, 6.0, 11.0]}
    assert [matmul_sweep.median(runs[k]) for k in "abc"] == [6.0, 5.5, 5.0]
    assert matmul_sweep.median([3.0, 1.0, 2.0]) == 2.0


def test_matmul_graph_rows_in_rounds_keep_medians_and_runs():
    """``--graph-rounds N`` (``timed_pair``): a graph row's cuBLAS and ours timed N times round-robin, the ratio of
    their medians, every run kept and shown as a spread; one round is the single timing a side it always was."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "triton"))
    import matmul_sweep

    times = {"cublas": iter([10.0, 12.0, 11.0]), "ours": iter([13.0, 11.0, 30.0])}
    row = matmul_sweep.timed_pair(lambda: "cublas", lambda: "ours", 3, bench=lambda fn: next(times[fn()]))
    assert (row["cublas_ms"], row["ours_ms"], row["ratio"]) == (11.0, 13.0, 13.0 / 11.0)
    assert row["ours_runs_ms"] == [13.0, 11.0, 30.0] and row["cublas_runs_ms"] == [10.0, 12.0, 11.0]
    assert matmul_sweep.spread(row) == " (runs 10000.0-12000.0 / 11000.0-30000.0 us)"
    once = matmul_sweep.timed_pair(lambda: 2.0, lambda: 3.0, 1, bench=lambda fn: fn())
    assert once == {"cublas_ms": 2.0, "ours_ms": 3.0, "ratio": 1.5} and matmul_sweep.spread(once) == ""


def test_matmul_search_writes_a_launch_file_the_package_runs(tmp_path):
    """``--write-launches``: the retimed best of a (shape, M) as a launch file entry that ``use_launches`` loads and
    ``launch_for`` runs at that M; a launch the GPU tests do not prove (a ``--stages`` depth outside
    ``CANDIDATE_CONFIGS``) is not written."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "triton"))
    import matmul_sweep

    from rlk_models.ops.triton import matmul as mm

    best = mm.Launch((64, 64, 4, 4), split=mm.HALF, persistent=False, flat=True, block_k=128)
    med = {str(best): 0.0101, "default": 0.0123, "cublas": 0.0095}
    entries = matmul_sweep.launch_entry("o", 96, True, best, med)
    assert entries[0]["measured"] == {"us": 10.1, "default_us": 12.3, "default": str(mm.launch_for(96, 4096, 8, 4096)),
                                      "cublas_us": 9.5}
    path = tmp_path / "launches.json"
    mm.save_launches(path, entries)
    try:
        assert mm.use_launches(path) == {("groups", 4096, 4096): [(96, 96, best)]}
        assert mm.launch_for(96, 4096, 8, 4096) == best and mm.launch_for(97, 4096, 8, 4096) != best
    finally:
        mm.use_launches(None)
    deeper = best._replace(config=(64, 64, 4, 9))
    assert matmul_sweep.launch_entry("o", 96, True, deeper, {**med, str(deeper): 0.001}) == []
    # ``matmul_sweep.py launches FILE``: the entry as a TUNED row, the launch spelled as Python that builds it
    shape, row = matmul_sweep.tuned_rows(str(path)).splitlines()
    assert shape == "('groups', 4096, 4096):  # o"
    assert row.startswith("    (96, Launch((64, 64, 4, 4), split=4, persistent=False, flat=True, block_k=128)),")
    assert row.endswith("# 12.3 -> 10.1 us (cuBLAS 9.5; 1.29x -> 1.06x)")
    assert eval(row.split("#")[0].strip().rstrip(","), {"Launch": mm.Launch}) == (96, best)


def test_matmul_search_keeps_its_launch_file_as_each_shape_ends(tmp_path, monkeypatch):
    """``keep_results`` (each shape's end): the JSON and the launch file with the entries so far, so a search cut
    at its limit in a later shape leaves a launch file ``use_launches`` loads; a later shape's entry is added to
    the file, and a shape with no winner leaves the file as it was."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "triton"))
    import matmul_sweep

    from rlk_models.ops.triton import matmul as mm

    monkeypatch.setenv("OUT", str(tmp_path))
    path = tmp_path / "launches.json"
    res = {"info": {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "triton": "3.6.0"}, "shapes": {}}
    o32 = mm.Launch((32, 64, 4, 4), split=mm.HALF, persistent=False, flat=True, block_k=256)
    written = matmul_sweep.launch_entry("o", 32, True, o32, {str(o32): 0.0101, "default": 0.0123, "cublas": 0.0078})
    assert matmul_sweep.keep_results(res, [], str(path)) == [] and not path.exists()
    assert len(matmul_sweep.keep_results(res, written, str(path))) == 1  # the first shape's end
    doc = json.loads(path.read_text())
    assert doc["device"] == "NVIDIA H100 80GB HBM3" and doc["launches"] == written
    assert json.loads((tmp_path / "matmul_sweep.json").read_text())["launches_written"] == written
    try:
        assert mm.use_launches(path) == {("groups", 4096, 4096): [(32, 32, o32)]}
    finally:
        mm.use_launches(None)
    qkv = mm.Launch((192, 64, 12, 6), sm90=True)
    written += matmul_sweep.launch_entry("qkv", 768, False, qkv, {str(qkv): 0.0696, "default": 0.0740,
                                                                   "cublas": 0.0552})
    assert [e["layer"] for e in matmul_sweep.keep_results(res, written, str(path))] == ["o", "qkv"]
    assert [e["layer"] for e in json.loads(path.read_text())["launches"]] == ["o", "qkv"]


def test_matmul_sweep_reads_a_models_linear_shapes():
    """``--model DIR``: a Qwen3 config's linear layers as (K, N) at TP=1 -- Qwen3-8B's are the sweep's own five."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "triton"))
    import matmul_sweep

    qwen3_8b = {"hidden_size": 4096, "intermediate_size": 12288, "vocab_size": 151936, "num_attention_heads": 32,
                "num_key_value_heads": 8, "head_dim": 128}
    shapes = matmul_sweep.model_shapes(qwen3_8b)
    assert list(shapes.values()) == [matmul_sweep.SHAPES[s] for s in ("qkv", "o", "gate_up", "down", "lm_head")]
    assert list(shapes) == ["qkv_4096h", "o_4096h", "gate_up_4096h", "down_4096h", "lm_head_4096h"]
    assert matmul_sweep.model_row_parallel(qwen3_8b) == {"o_4096h", "down_4096h"}  # K-groups: the table's o, down
    llama = {"hidden_size": 2048, "intermediate_size": 8192, "vocab_size": 128256, "num_attention_heads": 32}
    assert matmul_sweep.model_shapes(llama)["qkv_2048h"] == (2048, 3 * 2048)  # no kv heads, no head_dim: MHA
    with pytest.raises(ValueError, match="no 'vocab_size'"):
        matmul_sweep.model_shapes({k: v for k, v in qwen3_8b.items() if k != "vocab_size"})


def test_vllm_history_reads_the_recorded_paired_runs(tmp_path):
    """``plot_vllm_history.py``: one point a call with both engines' runs (rlk's median over stock's, and the
    slowest-over-fastest to fastest-over-slowest bar), session 45's 8B call among them; calls under ``--profile``
    (the engine core in the benchmark's process), at TP=2, or without both engines' runs are left out."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import plot_vllm_history

    data = Path(__file__).resolve().parents[1] / "docs" / "data"
    s45 = [p for p in plot_vllm_history.history(data)["8b, 256 x 512"] if p["session"] == 45]
    assert len(s45) == 1 and s45[0]["mismatches"] == 0
    assert (round(s45[0]["ratio"], 3), round(s45[0]["low"], 3), round(s45[0]["high"], 3)) == (1.079, 0.809, 1.126)
    assert [p["session"] for p in plot_vllm_history.history(data)["8b, 256 x 512, H100"]] == [49]
    # runs with token ids out (``vllm_cuda.py`` from session 49: ``"detokenize": false``) are a series of their own
    runs, ids = {"throughput": {"runs_tok_per_s": [100.0]}}, tmp_path / "token_ids"
    ids.mkdir()
    (ids / "vllm_cuda_8b_2026-12-06-s50.json").write_text(json.dumps(
        {"shape": "8b", "tp": 1, "n": 256, "max_tokens": 512, "detokenize": False, "rlk": runs, "stock": runs}))
    assert list(plot_vllm_history.history(ids)) == ["8b, 256 x 512, token ids"]

    def call(name, **extra):
        doc = {"shape": "8b", "tp": 1, "n": 4, "max_tokens": 8, "varied": False,
               "stock": {"throughput": {"runs_tok_per_s": [10.0, 20.0, 30.0]}},
               "rlk": {"throughput": {"runs_tok_per_s": [15.0, 25.0, 35.0]}}} | extra
        (tmp_path / f"vllm_cuda_{name}.json").write_text(json.dumps(doc))

    call("8b_2026-12-05-s45")
    call("8b_2026-12-05-s45-profile", rlk={"throughput": {"runs_tok_per_s": [1.0]}, "profile": {}})
    call("8b_tp2_2026-12-05-s45", tp=2)
    call("8b_2026-12-05-s46", rlk={})
    call("8b_2026-12-05-nosession")
    assert plot_vllm_history.history(tmp_path) == {"8b, 4 x 8": [
        {"session": 45, "file": "vllm_cuda_8b_2026-12-05-s45.json", "ratio": 1.25, "low": 0.5, "high": 3.5,
         "mismatches": None}]}


def test_matmul_layer_rows_fold_inside_the_norm():
    """``matmul_sweep.py --layer``'s two sides of a row-parallel layer (``layer_fns``): ours gives the bits of our
    product followed by the residual add + RMSNorm, with a split launch's partials folded inside the norm (decode
    sizes); cuBLAS's product goes into the same norm. Under the interpreter on the CPU (no TMA)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "triton"))
    import matmul_sweep

    from rlk_models.ops.triton import add_rms_norm
    from rlk_models.ops.triton.matmul import Partials, linear_unfolded, matmul

    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(16, 4096, generator=g), torch.randn(64, 4096, generator=g) * 0.02
    residual, norm_w = torch.randn(16, 64, generator=g), torch.rand(64, generator=g) + 0.5
    assert isinstance(linear_unfolded(x, w), Partials)  # 16 rows: a split launch (its fold left to the norm)
    ours, cublas = matmul_sweep.layer_fns(x, w, residual, norm_w)
    want = add_rms_norm(matmul(x, w, row_parallel=True), residual, norm_w, 1e-6)
    got = ours()
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    ref = add_rms_norm(torch.nn.functional.linear(x, w), residual, norm_w, 1e-6)
    assert all(torch.equal(a, b) for a, b in zip(cublas(), ref))


def test_save_writes_whole_files_only(tmp_path, monkeypatch):
    """``harness.save``: the JSON under $OUT, replaced whole; a dump that fails leaves the last save and no
    temporary file."""
    monkeypatch.setenv("OUT", str(tmp_path))
    harness.save("run", {"a": 1})
    harness.save("run", {"a": 2})
    with pytest.raises(TypeError):
        harness.save("run", {"a": 3, ("b", 1): 0})  # a tuple key: no JSON (default= covers values only), mid-dump
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]
    assert json.loads((tmp_path / "run.json").read_text()) == {"a": 2}


def test_matmul_variance_spreads_tell_a_timings_noise_from_the_copies():
    """``matmul_variance.spreads``: a copy's widest rounds against the spread of the copies' medians, for each side,
    and ``pad_bytes`` puts every copy after the first at other addresses (past the allocator's 2 MiB rounding)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "triton"))
    import matmul_variance

    rows = [{"cublas_runs_ms": [0.058, 0.059, 0.058], "ours_runs_ms": [0.0702, 0.0705, 0.0709]},
            {"cublas_runs_ms": [0.060, 0.059, 0.059], "ours_runs_ms": [0.0871, 0.0868, 0.0871]}]
    s = matmul_variance.spreads(rows)
    assert s["ours"]["within_copy"] == pytest.approx(0.0709 / 0.0702)  # copy 0's rounds, the wider
    assert s["ours"]["across_copies"] == pytest.approx(0.0871 / 0.0705)
    assert (s["ours"]["fastest_ms"], s["ours"]["slowest_ms"]) == (0.0705, 0.0871)
    assert s["cublas"]["within_copy"] == pytest.approx(0.059 / 0.058)  # copy 0's again (1.0172 > 1.0169)
    assert s["cublas"]["across_copies"] == pytest.approx(0.059 / 0.058)
    pads = [matmul_variance.pad_bytes(i) for i in range(4)]
    assert pads[0] == 0 and all(b - a > 2 * 1024 * 1024 and (b - a) % (1 << 21) for a, b in zip(pads, pads[1:]))


def test_matmul_variance_plot_draws_a_panel_a_run(tmp_path):
    """``matmul_variance.py plot``: session 56's two runs (docs/data) as one PNG, a 5-inch panel each at 110 dpi."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "triton"))
    import matmul_variance
    import matplotlib.image

    data = Path(__file__).resolve().parents[1] / "docs" / "data"
    runs = [str(data / f) for f in ("matmul_variance_2026-12-06-s56-h100.json",
                                    "matmul_variance_more_2026-12-06-s56-h100-last.json")]
    for n in (1, 2):
        matmul_variance.plot(runs[:n], str(tmp_path / f"{n}.png"))
        height, width = matplotlib.image.imread(tmp_path / f"{n}.png").shape[:2]
        assert (width, height) == (550 * n, 418)


def test_matmul_adopt_folds_a_proven_file_into_its_gpus_packaged_file(tmp_path, monkeypatch):
    """``matmul_sweep.py adopt FILE``: a device call's launch file into the package's file of the GPU its ``device``
    names, each entry keeping its medians and naming the file it came from, over the entries whose rows it overlaps;
    a file that names no GPU is refused with nothing written."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "triton"))
    import matmul_sweep

    from rlk_models.ops.triton import matmul as mm

    monkeypatch.setattr(mm, "DEVICE_LAUNCH_DIR", tmp_path / "launches")
    old = mm.Launch((64, 64, 4, 4), split=mm.HALF)
    o32 = mm.Launch((32, 64, 4, 6), split=mm.HALF, persistent=False, flat=True, block_k=256)
    gpu = "NVIDIA H100 80GB HBM3"
    was = {str(old): 0.0100, "default": 0.0120, "cublas": 0.0090}
    mm.save_launches(mm.device_launch_file(gpu), matmul_sweep.launch_entry("o", 24, True, old, was)
                     + matmul_sweep.launch_entry("o", 32, True, old, was), {"device": gpu})
    run = tmp_path / "s55r.json"
    med = {str(o32): 0.01015, "default": 0.01216, "cublas": 0.00761}
    mm.save_launches(run, matmul_sweep.launch_entry("o", 32, True, o32, med), {"device": gpu, "torch": "2.11.0"})
    into, entries = matmul_sweep.adopt(str(run))
    assert into == tmp_path / "launches" / "NVIDIA_H100_80GB_HBM3.json"
    assert [(e["rows"], e["launch"]["config"]) for e in entries] == [([24, 24], [64, 64, 4, 4]),
                                                                       ([32, 32], [32, 64, 4, 6])]
    default = str(mm.launch_for(32, 4096, 8, 4096))
    assert entries[1]["measured"] == {"us": 10.15, "default_us": 12.16, "default": default, "cublas_us": 7.61,
                                      "source": "s55r.json", "torch": "2.11.0"}
    try:
        assert mm.use_device_launches(gpu)[("groups", 4096, 4096)] == [(24, 24, old), (32, 32, o32)]
    finally:
        mm.use_device_launches(None)
    nameless = tmp_path / "nameless.json"
    mm.save_launches(nameless, matmul_sweep.launch_entry("o", 16, True, old, was))
    before = into.read_text()
    with pytest.raises(ValueError, match="no \"device\" field"):
        matmul_sweep.adopt(str(nameless))
    assert into.read_text() == before
