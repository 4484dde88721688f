"""The OpenAI server (``rlk-serve``) on 127.0.0.1: 32 concurrent completion requests of mixed
lengths, every returned log-prob (sampled and prompt) bitwise equal to the training class;
malformed requests get a 4xx and the server keeps serving."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlk_models.rollout.engine import right_pad
from rlk_models.rollout.parity import Report, mixed_prompts

from .conftest import ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url, body, timeout=180):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@contextlib.contextmanager
def running_server(ckpt: str, log_path, extra: list[str]):
    """``rlk-serve ckpt`` on a free local port until the block ends; yields its base URL."""
    port = _free_port()
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlk_models.cli.serve", ckpt, "--host", "127.0.0.1", "--port", str(port),
         "--max-model-len", "512", "--max-num-batched-tokens", "512", "--dtype", "bfloat16", "--seed", "0", *extra],
        stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1"))
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    try:
        while True:
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                log.flush()
                raise RuntimeError(f"server did not start:\n{open(log.name).read()[-4000:]}")
            time.sleep(1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def server(checkpoints, tmp_path_factory):
    ckpt = str(checkpoints["qwen3"][1])
    with running_server(ckpt, tmp_path_factory.mktemp("server") / "server.log", ["--enforce-eager"]) as base:
        yield base, ckpt


def _complete(base, ckpt, prompt, i, seed=None):
    return _post(base + "/v1/completions", {
        "model": ckpt, "prompt": prompt, "max_tokens": 6 + i % 5, "temperature": 1.0, "logprobs": 0,
        "prompt_logprobs": 0 if i % 2 == 0 else None, "return_token_ids": True,
        **({"seed": seed + i} if seed is not None else {})})


def concurrent_parity(base, ckpt, seed=None, device="cpu") -> Report:
    """32 concurrent completions of mixed-length prompts (longer together than the 512-token step
    budget) against the training class's log-probs of the same tokens (on ``device``)."""
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16).to(device).eval()
    prompts = (mixed_prompts(model.config.vocab_size, n=16) + mixed_prompts(model.config.vocab_size, n=16, seed=1))
    assert len(prompts) == 32
    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(lambda a: _complete(base, ckpt, *a, seed=seed),
                                 [(p, i) for i, p in enumerate(prompts)]))
    report = Report("server")
    seqs, got_all = [], []
    for p, (status, body) in zip(prompts, results):
        assert status == 200, body
        choice = body["choices"][0]
        seqs.append(p + choice["token_ids"])
        got = {}
        if choice.get("prompt_logprobs"):
            for j in range(1, len(p)):
                got[j - 1] = choice["prompt_logprobs"][j][str(p[j])]["logprob"]
        for k, lp in enumerate(choice["logprobs"]["token_logprobs"]):
            got[len(p) + k - 1] = lp
        got_all.append(got)
    ids, mask = right_pad(seqs)
    with torch.no_grad():
        want = model.token_logprobs(ids.to(device), mask.to(device)).cpu()
    for i, got in enumerate(got_all):
        report.add(list(got.values()), [want[i, t].item() for t in got])
    return report


def test_concurrent_requests_bitwise_equal_training(server):
    report = concurrent_parity(*server)
    assert report.tokens > 500
    assert report.mismatch_count == 0 and report.max_abs_diff == 0.0, report


def test_concurrent_seeded_requests_keep_the_server_up(server):
    """Per-request seeds: vllm-cpu 0.32 crashes its engine when a seeded request's prefill is
    chunked (it rewinds a CPU generator's offset); rlk-serve turns chunked prefill off on CPU, so
    the same burst is served, bit for bit, and the server stays up."""
    base, ckpt = server
    report = concurrent_parity(base, ckpt, seed=1000)
    assert report.tokens > 500 and report.mismatch_count == 0, report
    with urllib.request.urlopen(base + "/health", timeout=5) as r:
        assert r.status == 200


@pytest.mark.parametrize("body", [
    {"prompt": [5, 10_000_000], "max_tokens": 2},           # token id out of range
    {"prompt": list(range(1, 600)), "max_tokens": 2},       # longer than max_model_len
    {"prompt": [5, 6], "max_tokens": 2, "logprobs": -4},    # invalid parameter
])
def test_malformed_requests_get_4xx_and_server_keeps_serving(server, body):
    base, ckpt = server
    status, _ = _post(base + "/v1/completions", {"model": ckpt, **body})
    assert 400 <= status < 500
    status, ok = _post(base + "/v1/completions", {"model": ckpt, "prompt": [5, 6, 7], "max_tokens": 2,
                                                  "return_token_ids": True, "ignore_eos": True})
    assert status == 200 and len(ok["choices"][0]["token_ids"]) == 2
