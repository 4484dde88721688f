"""``HeadGraphs``' sizes and its eager fall-through, on the CPU (its replays against the eager head,
bitwise, are tests/gpu/test_triton_contract_8b.py::test_head_graphs_give_the_eager_heads_bits)."""

import pytest
import torch

from rlk_models.modeling.head_graphs import HEAD_GRAPH_ROWS, HeadGraphs, graph_sizes


@pytest.mark.parametrize("rows", [1, 2, 5, 64, 65, 100, 128, 200, HEAD_GRAPH_ROWS])
def test_graph_sizes_cover_every_row_count_with_under_a_tile_row_of_padding(rows):
    sizes = graph_sizes(rows)
    assert sizes == sorted(set(sizes)) and sizes[-1] == rows
    for t in range(1, rows + 1):
        b = next(b for b in sizes if b >= t)
        assert b - t < max(64, t), (t, b)  # powers of two to 64 rows, then less than one 64-row tile of padding
    assert graph_sizes(HEAD_GRAPH_ROWS) == [1, 2, 4, 8, 16, 32, 64, 128, 192, 256]


def test_head_graphs_run_the_eager_head_off_cuda_and_above_their_rows():
    calls = []

    def head(h, out):
        calls.append(out)
        return h.float() * 2

    graphs = HeadGraphs(rows=4)
    h = torch.ones(3, 8)
    assert torch.equal(graphs(head, h, torch.ones(16, 8), 16), h * 2)  # CPU: eager, no buffer
    assert calls == [None] and not graphs.graphs
    with pytest.raises(ValueError, match="rows must be >= 1"):
        HeadGraphs(rows=0)
