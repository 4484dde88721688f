"""CUDA graphs of the log-prob head for decode-sized steps (``HeadGraphs``), used by the vLLM
class's ``compute_logits``: vLLM captures the decoder's decode steps in its own graphs but calls
``compute_logits`` outside them. No vLLM import here (benchmarks and tests use it alone)."""

from __future__ import annotations

import torch

HEAD_GRAPH_ROWS = 256  # steps of up to this many sequences (the engine's max_num_seqs if fewer) run the head as a graph


def graph_sizes(rows: int) -> list[int]:
    """The row counts captured for up to ``rows`` rows: powers of two to 64, then multiples of 64
    (a step pads to the next one: at most 63 rows, under one tile row of the head's kernels), and
    ``rows`` itself last."""
    small = [1 << i for i in range(7) if (1 << i) < rows]
    return small + list(range(128, rows, 64)) + [rows]


class HeadGraphs:
    """CUDA graphs of the TP=1 log-prob head for decode-sized steps (1 to ``rows`` rows, padded up
    to ``graph_sizes``). vLLM calls ``compute_logits`` outside its model graphs, and the eager head
    is Python-launched kernels and their buffers. On the H200 that host time was what separated the
    rlk engine's batch-1 decode from stock vLLM's, whose head is one GEMM (0.3-0.4 ms a step,
    session 8). Larger decode steps are host-bound too, and the eager head's enqueue (180-234 us at
    1-64 rows against 40 us a replay, session 37) adds to their host time, so the graphs go to 256
    rows (session 40: bitwise the eager head on the H200, 0 mismatches in CUDA vLLM). The profiled
    batch-256 step that prompted it, 0.47-0.52 ms longer than stock's at the same GPU time, turned
    out to be vLLM's own Python between steps, not the head (docs/benchmarks.md, session 40).

    A replay runs the same kernels with the same arguments, so its bits are the eager head's; the
    padding rows hold stale hidden states and change nothing (every row is computed on its own).
    Every graph writes its log-probs into one shared fp32 [rows, V] buffer
    (``full_logprobs(out=)``: 156 MB at 256 rows and Qwen3's vocab, where a buffer a graph would
    take 427 MB). All sizes are captured on the first call that fits them (then never mid-run).
    Weights must change in place (vLLM's own graphs need that too); a different weight tensor drops
    the graphs and captures them again. The returned rows are a view of the shared buffer, valid
    until the next call.

    ``head(h, out)`` computes the log-probs of ``h`` into ``out`` (fp32 [T, V]) and returns it."""

    def __init__(self, rows: int = HEAD_GRAPH_ROWS):
        if rows < 1:
            raise ValueError(f"HeadGraphs: rows must be >= 1, got {rows}")
        self.rows = rows
        self.sizes = graph_sizes(rows)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.key: tuple | None = None
        self.h: torch.Tensor | None = None
        self.out: torch.Tensor | None = None
        self.pool = None

    def __call__(self, head, h: torch.Tensor, w: torch.Tensor, vocab_size: int) -> torch.Tensor:
        t = h.shape[0]
        if not (h.is_cuda and 0 < t <= self.rows) or torch.cuda.is_current_stream_capturing():
            return head(h, None)
        key = (w.data_ptr(), tuple(w.shape), h.dtype, h.shape[1], h.device, vocab_size)
        # buffers and captures are plain tensors, not inference tensors: vLLM steps run under
        # inference_mode, and an inference tensor could not be written outside it (e.g. in a test)
        if key != self.key:  # every size at once, on the first decode step (then never mid-run)
            self.graphs.clear()
            self.key, self.pool = None, torch.cuda.graph_pool_handle()  # the key once every size is captured
            with torch.inference_mode(False):
                self.h = torch.zeros(self.rows, h.shape[1], dtype=h.dtype, device=h.device)
                self.out = torch.empty(self.rows, vocab_size, dtype=torch.float32, device=h.device)
                for b in self.sizes:
                    head(self.h[:b], self.out[:b])  # compiles the kernels for this shape outside the capture
                    g = torch.cuda.CUDAGraph()
                    # thread_local: vLLM's output thread may wait on events while this thread captures
                    with torch.cuda.graph(g, pool=self.pool, capture_error_mode="thread_local"):
                        head(self.h[:b], self.out[:b])
                    self.graphs[b] = g
            self.key = key
        self.h[:t].copy_(h)
        self.graphs[next(b for b in self.sizes if b >= t)].replay()
        return self.out[:t]
