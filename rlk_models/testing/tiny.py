"""Tiny Qwen3/Llama checkpoints made locally: a byte-level BPE tokenizer trained on generated
text and randomly initialised weights saved by transformers itself. Nothing is downloaded.
Used by the tests, the demo, and anyone who wants a model that runs anywhere in seconds.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

from ..families import FAMILIES

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
    """Save a randomly initialised *stock transformers* checkpoint of ``family`` (its
    ``Family.tiny`` config, plus a tokenizer) to ``path``; convert it with
    ``rlk_models.conversion.convert`` to get an rlk checkpoint."""
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = FAMILIES[family]
    tok = train_tokenizer(vocab_size)
    cfg = AutoConfig.for_model(spec.hf_model_type, **{
        **spec.tiny, "vocab_size": len(tok), "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id,
        "bos_token_id": None, **overrides})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).to(dtype)
    path = Path(path)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def word_tokenizer(vocab_size: int):
    """A word-level tokenizer with exactly ``vocab_size`` entries (``<unk>``, ``<eos>``, ``w2``,
    ``w3``, ...): any vocab size, no training; prompts are ``"w17 w4093 ..."``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<eos>": 1, **{f"w{i}": i for i in range(2, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")


def make_sized_hf_checkpoint(path: str | Path, family: str, config: dict, *, seed: int = 0,
                             dtype: torch.dtype = torch.bfloat16) -> Path:
    """A randomly initialised stock checkpoint of any size (``config``: the model's fields,
    ``vocab_size`` included) with a ``word_tokenizer``: the benchmarks' Qwen3-1.7B/8B shapes."""
    from transformers import AutoConfig, AutoModelForCausalLM

    tok = word_tokenizer(config["vocab_size"])
    cfg = AutoConfig.for_model(FAMILIES[family].hf_model_type, **{
        **config, "eos_token_id": tok.eos_token_id, "pad_token_id": None, "bos_token_id": None})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    path = Path(path)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
