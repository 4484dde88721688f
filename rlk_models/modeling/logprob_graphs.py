"""CUDA graphs of the training class's log-prob pass (``LogprobGraphs``): what
``packed_token_logprobs(..., cuda_graphs=True)`` and ``token_logprobs(..., cuda_graphs=True)`` run.

Why: at small micro-batches the pass is host-bound. A 1.7B forward of one 1,024-token sequence
queued 350 kernels (6.8 ms of GPU time) in ~66 ms of host time on an H100, and its training step
(forward and backward, 1,051 kernels, 26.6 ms of GPU time) took 174 ms (session 58: 0.47x stock
transformers' forward-only tokens/s, 0.87x its training tokens/s). A graph replays the same
kernels with one launch.

Two kinds of graph. With gradients off (an RL step's old-policy and reference passes) one graph
runs the forward. With gradients on and parameters that require them (the policy's own pass),
two graphs do, as ``torch.cuda.make_graphed_callables`` builds them: the forward (its saved
activations stay in the graph's memory) and the backward of the log-probs into every parameter,
replayed by the autograd node the forward returns. The backward graph adds each parameter's gradient
into a buffer of that parameter's size as soon as it is computed (autograd's own in-place
accumulation, captured), and after the replay the parameter's ``.grad`` is that buffer
(``GradBuffers``: one set for all the padded sizes, the memory eager ``.grad`` takes), so the
gradients cost no more memory than an eager backward's. A training graph keeps its own memory pool (its
activations and the backward's transient tensors), so at
most ``max_train_graphs`` are kept, and a forward of one padded size must be backpropagated (or
dropped) before the next forward of that size, which would overwrite its activations: refused
with an error otherwise. The entropy comes without a gradient there (the backward graph carries the
log-probs'; a backward through the entropy raises).
The gradients are the eager backward's of the padded batch, the pad tokens' log-probs given zero
gradient (the tests compare them bitwise): the backward's sums over tokens are not batch-invariant
(``ops/CONTRACT.md``), so they need not be the unpadded batch's bits.

How the bits stay the eager pass's: the graph runs the same ops on a padded batch -- the real
tokens, then one pad sequence (ids 0, positions 0; empty where the tokens fill the size) up to the batch's padded
size (``buckets``: eight sizes an octave, multiples of ``token_step``) -- and every op of the
contract computes a token's row independently of the other rows and of their number (batch
invariance: what lets vLLM's padded decode graphs give the training class's bits). The varlen
attention's grid is fixed at capture by the longest sequence, rounded up to a power of two; tiles
past a sequence's end do nothing. With a ``score_mask`` (an RL step's completion tokens) the head
runs over a quarter, half or three quarters of the padded rows, the scored ones first (``scored_rows``;
each row's log-prob is its own, whichever rows are beside it). A graph is kept per (padded tokens,
sequences, padded longest sequence, entropy or not, head rows) and reused for any batch with that key;
captures go in one memory pool, up to ``max_graphs`` (least recently used dropped).

Limits: parameters must stay where they are (an optimizer's in-place update is fine: a replay reads
the live weights; a parameter moved to other memory -- ``.to()``, a reload that replaces tensors
-- is noticed by its address and the graphs are captured again). Not for sharded or offloaded
models (FSDP gathers parameters into new memory each forward). The value checks the eager pass
makes inside its ops (token ids in the vocabulary, positions within the RoPE table) are made here,
before the replay, with one host read of ``cu_seqlens`` and the ids' range.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from ..ops.checks import check_ids_range, check_last_position, cu_seqlens_read_as, packed_lengths

TOKEN_STEP = 256  # padded token counts are multiples of this, attention grids at least this many rows
MAX_GRAPHS = 32
MAX_TRAIN_GRAPHS = 4


def buckets(lengths: list[int], step: int = TOKEN_STEP) -> tuple[int, int, int]:
    """(padded tokens, sequences, padded longest) of a packed batch of sequence ``lengths``, which
    keys its graph. The tokens are padded to the next multiple (at least one; the pad sequence is
    empty at an exact multiple) of ``step`` or of an eighth of their power of two, whichever is larger: eight
    sizes an octave, at most 12.5% (or ``step`` tokens) of padding. The attention grid's rows are
    the longest sequence (the pad one included) rounded up to a power of two, at least ``step``, at
    most the padded tokens: a grid of more rows only adds programs that find no tokens and exit."""
    t = sum(lengths)
    unit = max(step, 1 << max(t.bit_length() - 4, 0))
    t_pad = max(unit, -(-t // unit) * unit)
    longest = max([*lengths, t_pad - t])
    return t_pad, len(lengths), min(t_pad, max(step, 1 << (longest - 1).bit_length()))


def scored_rows(scored: int, t_pad: int) -> int | None:
    """How many rows of a padded batch of ``t_pad`` tokens the head runs over when ``scored`` of them are wanted
    (a caller's ``score_mask``): ``scored`` rounded up to a quarter of ``t_pad`` (at least one quarter), or None --
    the head over every row, no selection -- where that would be more than three quarters. Four sizes a padded
    batch, so the scored share of a batch adds at most three graphs to its size's one."""
    quarter = t_pad // 4
    if quarter == 0:
        return None
    rows = max(1, -(-scored // quarter)) * quarter
    return rows if rows <= 3 * quarter else None


def template_lengths(t_pad: int, n_seq: int, longest: int) -> list[int]:
    """``n_seq + 1`` sequence lengths summing to ``t_pad`` whose longest is exactly ``longest``: the
    batch a graph is captured on, which sets the attention's grid (the replayed batches fit in it:
    ``buckets`` gives t_pad <= (n_seq + 1) * longest and longest <= t_pad)."""
    if not (0 < longest <= t_pad <= (n_seq + 1) * longest):
        raise ValueError(f"no template of {n_seq + 1} sequences, {t_pad} tokens, longest {longest}")
    out, left = [], t_pad
    for _ in range(n_seq + 1):
        out.append(min(longest, left))
        left -= out[-1]
    return out


@dataclass
class PaddedBatch:
    """The static inputs of one graph: a batch of ``t_pad`` tokens in ``n_seq`` sequences and the pad one,
    attended over a grid of ``longest`` rows a sequence. ``fill`` writes a batch in; ``run`` is the pass a
    graph captures (eagerly: the same bits, the grid fixed at ``longest``)."""
    ids: torch.Tensor        # [t_pad] int64
    positions: torch.Tensor  # [t_pad] int64
    cu: torch.Tensor         # [n_seq + 2] int64
    targets: torch.Tensor    # [t_pad] int64
    longest: int
    rows: torch.Tensor | None = None  # [r_pad] int64, distinct: the rows the head runs over (None: every row)

    @classmethod
    def empty(cls, t_pad: int, n_seq: int, longest: int, device, rows: int | None = None) -> PaddedBatch:
        """Zeros, and the bounds of ``template_lengths``' batch (a batch the grid fits: what the warm-up runs);
        ``rows``: the head over that many selected rows (``scored_rows``), the first ones until ``fill``."""
        bounds = [0]
        for n in template_lengths(t_pad, n_seq, longest):
            bounds.append(bounds[-1] + n)
        ids = torch.zeros(t_pad, dtype=torch.int64, device=device)
        if rows is not None and not 0 < rows <= t_pad:
            raise ValueError(f"PaddedBatch: {rows} head rows in a batch of {t_pad} tokens")
        return cls(ids, torch.zeros_like(ids), torch.tensor(bounds, dtype=torch.int64, device=device),
                   torch.zeros_like(ids), longest,
                   None if rows is None else torch.arange(rows, dtype=torch.int64, device=device))

    def fill(self, input_ids: torch.Tensor, cu: torch.Tensor, score: torch.Tensor | None = None) -> torch.Tensor:
        """Writes the batch ``input_ids [T]`` split at ``cu [n_seq + 1]`` (int64) into the first T rows and the pad
        sequence (ids 0, positions 0) after them; returns ``valid [T]``, the tokens with a successor (and, where
        ``score [T]`` (bool) is given, wanted). With ``rows``, the head's rows are the scored tokens (at most
        ``rows`` of them) in order, then unscored ones: a stable sort on the device, no host read."""
        from .hf import next_token_targets, packed_positions  # hf imports this module
        t = input_ids.numel()
        if self.rows is not None:
            if score is None:
                raise ValueError("PaddedBatch.fill: a batch of selected head rows needs the score mask")
            unscored = torch.ones(self.ids.numel(), dtype=torch.uint8, device=self.ids.device)
            unscored[:t] = ~score
            self.rows.copy_(torch.argsort(unscored, stable=True)[:self.rows.numel()])
        self.ids[:t].copy_(input_ids)
        self.ids[t:].zero_()
        self.positions[:t].copy_(packed_positions(cu, t))
        self.positions[t:].zero_()
        self.cu[:-1].copy_(cu)
        self.cu[-1:].fill_(self.ids.numel())
        targets, valid = next_token_targets(input_ids, cu)
        self.targets[:t].copy_(targets)
        self.targets[t:].zero_()
        return valid if score is None else valid & score

    def run(self, model, entropy: bool):
        """(log-probs [t_pad], entropy [t_pad] or None) of the padded batch, the attention's grid at ``longest``
        rows a sequence whatever ``cu`` holds (``checks.cu_seqlens_read_as``: no host read, which a capture
        cannot make). With ``rows``, the head runs over those rows only (each row's bits are its own: the head is
        batch-invariant) and the other rows' outputs are 0."""
        with cu_seqlens_read_as(self.cu, (0, self.ids.numel(), self.longest)):
            hidden = model.packed_hidden_states(self.ids, self.cu, self.positions)
            if self.rows is None:
                return model._head(hidden, self.targets, entropy)
            return model._head_at(hidden, self.targets, self.rows, entropy)


@contextlib.contextmanager
def fresh_leaves(model, params: list) -> Iterator[list]:
    """Within, each of ``params`` (parameters of ``model``) is replaced in its modules by a new leaf over the same
    memory (a tied parameter by one leaf wherever it appears); yields those leaves, in ``params``' order.

    Why the training graphs capture over them: the autograd engine sends a parameter's gradient to the stream its
    ``AccumulateGrad`` node was created on. A node made by an eager pass on the default stream lives as long as
    any output of that pass (a kept loss, an earlier graphed output), and a captured backward sending a gradient
    to it would make the default stream wait on the capturing one, which CUDA refuses
    (``cudaErrorStreamCaptureImplicit``). The fresh leaves' nodes are made inside the capture, on its stream. They
    read and are read as the parameters: a replay sees in-place updates, and the gradients are the parameters'."""
    leaf = {id(p): torch.nn.Parameter(p.detach(), requires_grad=True) for p in params}
    swapped = []
    try:
        for m in model.modules():
            for name, p in m._parameters.items():
                if p is not None and id(p) in leaf:
                    swapped.append((m, name, p))
                    m._parameters[name] = leaf[id(p)]
        yield [leaf[id(p)] for p in params]
    finally:
        for m, name, p in swapped:
            m._parameters[name] = p


def _alias(t: torch.Tensor) -> torch.Tensor:
    """A new tensor object over ``t``'s memory (not an autograd view: ``set_`` can later move it elsewhere)."""
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), t.storage_offset(), t.shape,
                                                                t.stride())


class GradBuffers:
    """Where the backward graphs leave the parameters' gradients: one buffer per parameter, shared by every padded
    size's backward graph, which adds its gradients into them in place (``attach`` gives the captured leaves these
    buffers as ``.grad``: autograd's in-place accumulation is what the graph records).

    ``collect`` runs a backward replay for autograd. In the usual case -- ``loss.backward()`` reaching every
    parameter, no hooks on them -- it hands no gradient to autograd: it makes each parameter's ``.grad`` its buffer
    (as DDP's ``gradient_as_bucket_view`` does), so the gradients take the memory an eager ``.grad`` takes and no
    copy is made. Per parameter: a ``.grad`` that is its buffer accumulates in place (``+=``, as eager's does); a
    ``.grad`` of None gets the buffer, zeroed, then the gradient (0 + g: g's bits, a -0.0 read as +0.0); another
    tensor as ``.grad`` gets the gradient added into it, in place. A buffer handed out as ``.grad`` and still held
    elsewhere when it would be written again (``g = p.grad; opt.zero_grad()``: ``g`` is still alive) is first moved
    to memory of its own, so a kept gradient never changes. Otherwise (``torch.autograd.grad``, ``backward(inputs=
    ...)`` leaving a parameter out, a tensor hook or a post-accumulate hook on a parameter) the gradients are handed
    to autograd as copies, as the eager backward would.

    Limit: one backward through several graphed outputs (or a graphed output and an eager pass of the same model)
    gives the bits of one backward call per output: each adds its gradients into ``.grad`` in turn, where one eager
    backward would sum a parameter's contributions first (in its own order) and then add the sum. The same bits for
    a parameter with one contribution per output into an empty ``.grad``; maybe not in the last bit for a tied one
    (two contributions each), or where ``.grad`` holds an earlier micro-batch's."""

    def __init__(self, params: list):
        self.store = [torch.zeros_like(p) for p in params]
        self.handed: list[weakref.ref | None] = [None] * len(params)

    def attach(self, leaves: list, used: list[bool]) -> list:
        """Sets each used leaf's ``.grad`` to its buffer (before the backward's capture); returns the used leaves."""
        out = []
        for leaf, buf, u in zip(leaves, self.store, used):
            if u:
                leaf.grad = buf
                out.append(leaf)
        return out

    def _given(self, i: int) -> torch.Tensor | None:
        return self.handed[i]() if self.handed[i] is not None else None

    def _release(self, i: int) -> None:
        """Buffer ``i`` is about to be overwritten: a tensor it was handed out as, still alive, gets its own copy."""
        given = self._given(i)
        if given is not None:
            given.set_(given.clone())
        self.handed[i] = None

    @staticmethod
    def _accumulates(params: list, nodes: list) -> bool:
        """Whether the running backward accumulates into every one of ``params``' ``.grad`` (``nodes``: their
        AccumulateGrad nodes) with no hook to run."""
        if any(p._backward_hooks or getattr(p, "_post_accumulate_grad_hooks", None) for p in params):
            return False
        try:
            return all(torch._C._will_engine_execute_node(node) for node in nodes)
        except RuntimeError:  # torch.autograd.grad(): its leaves' gradients are captured, not accumulated
            return False

    def collect(self, params: list, used: list[bool], replay, nodes: list | None = None) -> tuple:
        """Runs ``replay()`` (the backward graph: ``buffer += gradient`` for each used parameter) inside an autograd
        backward; returns what that backward hands autograd for ``params``. ``nodes``: the parameters'
        AccumulateGrad nodes where the caller has them (the backward's ``ctx.next_functions``: cheaper than
        looking each up)."""
        live = [i for i, u in enumerate(used) if u]
        if nodes is None or len(nodes) != len(params):
            nodes = [torch.autograd.graph.get_gradient_edge(p).node for p in params]
        with torch.no_grad():
            if not self._accumulates([params[i] for i in live], [nodes[i] for i in live]):
                for i in live:
                    self._release(i)
                torch._foreach_zero_([self.store[i] for i in live])
                replay()
                return tuple(self.store[i].clone() if u else None for i, u in enumerate(used))
            fresh, added = [], []
            for i in live:
                grad = params[i].grad
                if grad is not None and grad is self._given(i):
                    continue  # accumulates in place
                self._release(i)
                (fresh if grad is None else added).append(i)
            if fresh or added:
                torch._foreach_zero_([self.store[i] for i in fresh + added])
            replay()
            for i in added:
                params[i].grad.add_(self.store[i])
            for i in fresh:
                params[i].grad = grad = _alias(self.store[i])
                self.handed[i] = weakref.ref(grad)
        return (None,) * len(params)


def _kept_entropy(entropy: torch.Tensor | None, t: int, score: torch.Tensor | None, copy: bool):
    """The real tokens' entropy of a padded batch's output (0 outside ``score``); a copy where ``copy`` (a static
    output, which the next replay writes)."""
    if entropy is None:
        return None
    if score is not None:
        return torch.where(score, entropy[:t], 0.0)
    return entropy[:t].clone() if copy else entropy[:t]


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    batch: PaddedBatch       # static inputs (outside the graph pool)
    logp: torch.Tensor       # [t_pad] float32, the graph's outputs
    entropy: torch.Tensor | None


class _Ticket:
    """One training forward's claim on its graph's activations (weakly held by the graph: a dropped output frees
    the claim)."""
    done = False


@dataclass
class _TrainGraph:
    forward: torch.cuda.CUDAGraph
    backward: torch.cuda.CUDAGraph
    batch: PaddedBatch
    logp: torch.Tensor                   # [t_pad] float32, the forward's output
    entropy: torch.Tensor | None         # [t_pad] float32 where asked for (its gradient is not graphed)
    grad_logp: torch.Tensor              # [t_pad] float32, the backward's input (outside the pool)
    used: list                           # per parameter: whether the log-probs reach it (its gradient is graphed)
    buffers: GradBuffers                 # where the backward adds the gradients (shared by the model's graphs)
    pool: tuple
    pending: weakref.ref | None = None   # the last forward's _Ticket

    def waiting(self) -> bool:
        ticket = self.pending() if self.pending is not None else None
        return ticket is not None and not ticket.done


class _Replay(torch.autograd.Function):
    """A training graph's forward replay; its backward replays the backward graph, whose gradients
    ``GradBuffers.collect`` leaves in ``.grad`` (or hands to autograd)."""

    @staticmethod
    def forward(ctx, g: _TrainGraph, *params):
        g.forward.replay()
        ctx.g, ctx.ticket, ctx.params = g, _Ticket(), params
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None (the entropy's, mostly)
        g.pending = weakref.ref(ctx.ticket)
        # copies: the next replay writes the static outputs
        return g.logp.clone(), (g.entropy.clone() if g.entropy is not None else None)

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        g = ctx.g
        if grad_entropy is not None:
            raise RuntimeError("cuda_graphs=True: the entropy's gradient is not graphed (the graph backpropagates the "
                               "log-probs only): detach the entropy, or leave cuda_graphs off to differentiate it")
        if g.pending is None or g.pending() is not ctx.ticket:
            raise RuntimeError("cuda_graphs=True: this padded size's graph ran another forward after this output's, "
                               "so its saved activations are gone: backpropagate each output before the next forward")
        if grad_logp is None:
            g.grad_logp.zero_()
        else:
            g.grad_logp.copy_(grad_logp)
        grads = g.buffers.collect(list(ctx.params), g.used, g.backward.replay,
                                  [node for node, _ in ctx.next_functions])  # one per tensor input: the parameters
        ctx.ticket.done = True
        return (None, *grads)


class LogprobGraphs:
    """The graphs of one model (``RLKForCausalLM.logprob_graphs``); ``clear()`` drops them and their
    memory pools. A copy (``copy.deepcopy(model)``, e.g. a reference model) starts with none."""

    def __init__(self, token_step: int = TOKEN_STEP, max_graphs: int = MAX_GRAPHS,
                 max_train_graphs: int = MAX_TRAIN_GRAPHS):
        if token_step < 1 or token_step & (token_step - 1) or max_graphs < 1 or max_train_graphs < 1:
            raise ValueError(f"LogprobGraphs: token_step must be a power of two, max_graphs and max_train_graphs >= "
                             f"1, got {token_step}, {max_graphs}, {max_train_graphs}")
        self.token_step, self.max_graphs, self.max_train_graphs = token_step, max_graphs, max_train_graphs
        self.graphs: OrderedDict[tuple, _Graph] = OrderedDict()
        self.train_graphs: OrderedDict[tuple, _TrainGraph] = OrderedDict()
        self.params: tuple | None = None
        self.pool = None
        self.grad_buffers: GradBuffers | None = None  # made at the first training capture
        self.captures = 0  # graphs captured so far (a test's and a benchmark's count of cache misses)

    def __deepcopy__(self, memo):
        return LogprobGraphs(self.token_step, self.max_graphs, self.max_train_graphs)

    def __getstate__(self):
        return {"token_step": self.token_step, "max_graphs": self.max_graphs,
                "max_train_graphs": self.max_train_graphs}

    def __setstate__(self, state):
        self.__init__(**state)

    def clear(self) -> None:
        self.graphs.clear()
        self.train_graphs.clear()
        self.params, self.pool, self.grad_buffers = None, None, None

    def __call__(self, model, input_ids: torch.Tensor, cu_seqlens: torch.Tensor, return_entropy: bool,
                 score: torch.Tensor | None = None, also: tuple[torch.Tensor, Callable] | None = None):
        """``model.packed_token_logprobs(input_ids, cu_seqlens, return_entropy, score_mask=score)`` by graph
        replays: (log-probs [T] float32, entropy [T] or None); the last token of each sequence gets 0, and so does
        every token outside ``score`` (bool [T]; its entropy too), which the head then runs over only where they
        are at most three quarters of the padded batch (``scored_rows``). With gradients on and parameters that
        require them, the log-probs carry an autograd node whose backward is a graph too. ``also``: a caller's
        checks riding along this call's one host read, (an integer vector on the device, ``check``): ``check(*its
        values)`` runs after the read and before any replay or capture (it raises to refuse the batch)."""
        params = [p for p in model.parameters() if p.requires_grad] if torch.is_grad_enabled() else []
        t = input_ids.numel()
        cu = cu_seqlens.to(device=input_ids.device, dtype=torch.int64)
        lengths, scored = self._checked_lengths(model, input_ids, cu, score, also)  # the inputs' faults first
        if not input_ids.is_cuda:
            raise ValueError(f"cuda_graphs=True needs the model and input_ids on a CUDA device, got {input_ids.device}")
        t_pad, n_seq, longest = buckets(lengths, self.token_step)
        now = tuple((p.data_ptr(), p.requires_grad) for p in model.parameters())
        if now != self.params:  # weights moved: every graph reads the old addresses
            self.clear()
            self.params = now
        key = (t_pad, n_seq, longest, bool(return_entropy), None if score is None else scored_rows(scored, t_pad))
        if params:
            return self._train(model, input_ids, cu, key, params, score)
        g = self.graphs.get(key)
        if g is None:
            g = self._capture(model, key)
        self.graphs.move_to_end(key)

        # the static inputs are plain tensors, written from inside a caller's inference mode too (inference_mode(False)
        # turns gradients on: no_grad again)
        with torch.inference_mode(False), torch.no_grad():
            valid = g.batch.fill(input_ids, cu, score)
            g.graph.replay()
            # copies: the next replay writes the static outputs
            return torch.where(valid, g.logp[:t], 0.0), _kept_entropy(g.entropy, t, score, copy=True)

    @staticmethod
    def _checked_lengths(model, input_ids: torch.Tensor, cu: torch.Tensor, score: torch.Tensor | None,
                         also: tuple[torch.Tensor, Callable] | None = None) -> tuple[list[int], int]:
        """(the sequences' lengths, how many tokens ``score`` holds (0 without)), after the eager pass's checks of
        ``cu_seqlens``, the ids' range and the positions, and ``also``'s check, in one host read (``score``'s
        shape and dtype: ``packed_token_logprobs`` checked them)."""
        t = input_ids.numel()
        mine = [*torch.aminmax(input_ids)] if t else []
        if score is not None:
            mine.append(score.sum())
        vec = [torch.stack(mine).to(torch.int64)] if mine else []
        if also is not None:
            vec.append(also[0].to(device=cu.device, dtype=torch.int64))
        lengths, rest = packed_lengths(cu, t, also=torch.cat(vec) if vec else None)
        check_ids_range(*rest[:2], model.model.embed_tokens.weight.shape[0])
        check_last_position(max(lengths) - 1, model.config.max_position_embeddings)
        if also is not None:
            also[1](*rest[len(mine):])
        return lengths, (rest[2] if score is not None else 0)

    def _train(self, model, input_ids: torch.Tensor, cu: torch.Tensor, key: tuple, params: list,
               score: torch.Tensor | None):
        g = self.train_graphs.get(key)
        if g is None:
            g = self._capture_train(model, key, params)
        self.train_graphs.move_to_end(key)
        if g.waiting():
            raise RuntimeError(f"cuda_graphs=True: a forward of this padded size ({key[0]} tokens, {key[1]} sequences) "
                               "still waits for its backward, and its saved activations live in the graph's memory, "
                               "which this forward would overwrite: backpropagate (or drop) that output first, or "
                               "leave cuda_graphs off")
        t = input_ids.numel()
        with torch.no_grad():
            valid = g.batch.fill(input_ids, cu, score)
        logp, entropy = _Replay.apply(g, *params)
        return torch.where(valid, logp[:t], 0.0), _kept_entropy(entropy, t, score, copy=False)

    def _warm_up(self, device, run) -> None:
        """``run()`` once on a side stream: the kernels compile (and the ops cache their launch plans) outside a
        capture."""
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            run()
        torch.cuda.current_stream(device).wait_stream(side)

    def _capture(self, model, key: tuple) -> _Graph:
        t_pad, n_seq, longest, entropy, rows = key
        while len(self.graphs) >= self.max_graphs:
            self.graphs.popitem(last=False)
        device = model.model.embed_tokens.weight.device
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        with torch.inference_mode(False), torch.no_grad():
            batch = PaddedBatch.empty(t_pad, n_seq, longest, device, rows)
            self._warm_up(device, lambda: batch.run(model, entropy))
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                logp, ent = batch.run(model, entropy)
        self.captures += 1
        g = _Graph(graph, batch, logp, ent if entropy else None)
        self.graphs[key] = g
        return g

    def _capture_train(self, model, key: tuple, params: list) -> _TrainGraph:
        """The forward and backward graphs of one padded size, in a memory pool of their own (another size's
        forward may run between this size's forward and backward)."""
        t_pad, n_seq, longest, entropy, rows = key
        while len(self.train_graphs) >= self.max_train_graphs:
            self.train_graphs.popitem(last=False)
        device = model.model.embed_tokens.weight.device
        # thread_local: a colocated vLLM engine's threads may wait on events while this thread captures; the autograd
        # engine's device thread queues the backward's kernels on the forward's (capture) stream either way
        # over fresh leaves (``fresh_leaves``: an AccumulateGrad node an earlier eager pass left on the default
        # stream would break the backward's capture)
        if self.grad_buffers is None:
            self.grad_buffers = GradBuffers(params)
        with torch.inference_mode(False), torch.enable_grad(), fresh_leaves(model, params) as leaves:
            batch = PaddedBatch.empty(t_pad, n_seq, longest, device, rows)
            used = []

            def step():
                logp = batch.run(model, entropy)[0]
                grads = torch.autograd.grad(logp, leaves, torch.ones_like(logp), allow_unused=True)
                used[:] = [grad is not None for grad in grads]
            self._warm_up(device, step)
            pool = torch.cuda.graph_pool_handle()
            forward = torch.cuda.CUDAGraph()
            with torch.cuda.graph(forward, pool=pool, capture_error_mode="thread_local"):
                logp, ent = batch.run(model, entropy)
            grad_logp = torch.zeros_like(logp)
            inputs = self.grad_buffers.attach(leaves, used)
            backward = torch.cuda.CUDAGraph()
            with torch.cuda.graph(backward, pool=pool, capture_error_mode="thread_local"):
                # each gradient is added into its buffer (the leaf's .grad) as soon as it is computed, then freed
                torch.autograd.backward(logp, grad_logp, inputs=inputs)
        self.captures += 1
        g = _TrainGraph(forward, backward, batch, logp.detach(), ent.detach() if entropy else None, grad_logp, used,
                        self.grad_buffers, pool)
        self.train_graphs[key] = g
        return g
