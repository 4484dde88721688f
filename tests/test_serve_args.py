"""rlk-serve's argument rewriting: the logprobs mode the rlk class needs, and full decode CUDA
graphs on CUDA unless the user chose a compilation setting."""

import json

from rlk_models.cli.serve import server_argv
from rlk_models.rollout.engine import RLK_CUDA_GRAPHS


def test_server_argv():
    cpu = ["--no-enable-chunked-prefill"]
    assert server_argv(["ck"]) == ["--model", "ck", "--logprobs-mode", "raw_logits", *cpu]
    assert server_argv(["ck", "--logprobs-mode=raw_logits"]) == ["--model", "ck", "--logprobs-mode=raw_logits", *cpu]
    assert server_argv(["ck", "--enable-chunked-prefill"]) == ["--model", "ck", "--enable-chunked-prefill",
                                                               "--logprobs-mode", "raw_logits"]
    cuda = server_argv(["ck", "--port", "8001"], cuda=True)
    assert cuda[-2:] == ["--compilation-config", json.dumps(RLK_CUDA_GRAPHS)] and cuda[2:4] == ["--port", "8001"]
    assert server_argv(["ck", "--enforce-eager"], cuda=True) == ["--model", "ck", "--enforce-eager", "--logprobs-mode",
                                                                  "raw_logits"]
    assert server_argv(["ck", "--compilation-config", "{}"], cuda=True).count("--compilation-config") == 1
    assert server_argv(["ck", "-O=0"], cuda=True) == ["--model", "ck", "-O=0", "--logprobs-mode", "raw_logits"]
