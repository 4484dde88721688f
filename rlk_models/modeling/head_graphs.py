"""CUDA graphs of the log-prob head for decode-sized steps (``HeadGraphs``), used by the vLLM
class's ``compute_logits``: vLLM captures the decoder's decode steps in its own graphs but calls
``compute_logits`` outside them. No vLLM import here (benchmarks and tests use it alone)."""

from __future__ import annotations

import torch

HEAD_GRAPH_ROWS = 64  # decode steps of up to this many sequences run the head as a CUDA graph


class HeadGraphs:
    """CUDA graphs of the TP=1 log-prob head for decode-sized steps (1 to ``rows`` rows, padded
    up to a power of two). vLLM calls ``compute_logits`` outside its model graphs, and the head is
    five Python-launched kernels and their buffers: on the H200 that host time (0.3-0.4 ms a
    step) is what separated the rlk engine's batch-1 decode from stock vLLM's, whose head is one
    GEMM. A replay runs the same kernels with the same arguments, so its bits are the eager
    head's; the padding rows hold stale hidden states and change nothing (every row is computed
    on its own). All sizes are captured on the first decode step. Weights must change in place
    (vLLM's own graphs need that too); a different weight tensor drops the graphs and captures
    them again. The returned rows are the graph's output buffer, valid until the next step."""

    def __init__(self, rows: int = HEAD_GRAPH_ROWS):
        self.rows = rows
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.key: tuple | None = None
        self.h: torch.Tensor | None = None
        self.pool = None

    def __call__(self, head, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        t = h.shape[0]
        if not (h.is_cuda and 0 < t <= self.rows) or torch.cuda.is_current_stream_capturing():
            return head(h)
        key = (w.data_ptr(), tuple(w.shape), h.dtype, h.shape[1], h.device)
        # buffers and captures are plain tensors, not inference tensors: vLLM steps run under
        # inference_mode, and an inference tensor could not be written outside it (e.g. in a test)
        if key != self.key:  # every size at once, on the first decode step (then never mid-run)
            self.graphs.clear()
            self.key, self.pool = key, torch.cuda.graph_pool_handle()
            with torch.inference_mode(False):
                self.h = torch.zeros(self.rows, h.shape[1], dtype=h.dtype, device=h.device)
                for b in (1 << i for i in range((self.rows - 1).bit_length() + 1)):
                    head(self.h[:b])  # compiles the kernels for this shape outside the capture
                    g = torch.cuda.CUDAGraph()
                    # thread_local: vLLM's output thread may wait on events while this thread captures
                    with torch.cuda.graph(g, pool=self.pool, capture_error_mode="thread_local"):
                        out = head(self.h[:b])
                    self.graphs[b] = (g, out)
        self.h[:t].copy_(h)
        g, out = self.graphs[1 << (t - 1).bit_length()]
        g.replay()
        return out[:t]
