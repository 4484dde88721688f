"""Tiny Qwen3/Llama checkpoints made locally: a byte-level BPE tokenizer trained on generated
text and randomly initialised weights saved by transformers itself. Nothing is downloaded.
Used by the tests, the demo, and anyone who wants a model that runs anywhere in seconds.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

TINY_QWEN3 = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, max_position_embeddings=512, rope_parameters={
                      "rope_type": "default", "rope_theta": 10000.0}, initializer_range=0.05,
                  tie_word_embeddings=False, rms_norm_eps=1e-6)
TINY_LLAMA = dict(TINY_QWEN3, rope_parameters={
    "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 64})

_WORDS = ("the a one two three four five six seven eight nine ten plus minus times equals answer is "
          "model token train roll out reward policy value step batch sum count add number digit").split()


def corpus(n_lines: int = 2000, seed: int = 0) -> list[str]:
    """Deterministic training text: arithmetic facts and word salad."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        lines.append(f"{a} + {b} = {a + b}")
        lines.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12))))
    return lines


def train_tokenizer(vocab_size: int = 512):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``corpus()``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|pad|>")


def make_tiny_hf_checkpoint(path: str | Path, family: str = "qwen3", *, seed: int = 0,
                            dtype: torch.dtype = torch.bfloat16, vocab_size: int = 512, **overrides) -> Path:
    """Save a randomly initialised *stock transformers* Qwen3/Llama checkpoint (plus tokenizer)
    to ``path``; convert it with ``rlk_models.conversion.convert`` to get an rlk checkpoint."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    cfg_cls, model_cls, base = {"qwen3": (Qwen3Config, Qwen3ForCausalLM, TINY_QWEN3),
                                "llama": (LlamaConfig, LlamaForCausalLM, TINY_LLAMA)}[family]
    tok = train_tokenizer(vocab_size)
    cfg = cfg_cls(**{**base, "vocab_size": len(tok), "eos_token_id": tok.eos_token_id,
                     "pad_token_id": tok.pad_token_id, "bos_token_id": None, **overrides})
    torch.manual_seed(seed)
    model = model_cls(cfg).to(dtype)
    path = Path(path)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
