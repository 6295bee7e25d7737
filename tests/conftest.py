"""Shared fixtures: tiny Qwen3 checkpoints built in a temp folder, and the book's default model.

- `model_path`: the default model folder (the generated tiny Qwen3, or $MINILLM_MODEL).
- `tiny_default_path`: the generated tiny Qwen3 folder itself, even when $MINILLM_MODEL is set.
- `model`: minillm's Transformer on that folder (fp32, CPU), loaded once per session.
- `tokenizer`: the folder's tokenizer (the real Qwen3 one for the tiny model).
- `tiny_checkpoint(**overrides)`: a random Qwen3 checkpoint folder with a 512-token vocabulary
  unless overridden; the same overrides and seed return the same folder within a test session.
- `tiny_model(**overrides)`: the same, loaded as a Transformer.
"""

from __future__ import annotations

import json

import pytest
import torch

from minillm.checkpoints import (
    TINY_CONFIG,
    TINY_NAME,
    TINY_SEED,
    cache_dir,
    default_model_path,
    ensure_checkpoint,
    load_tokenizer,
    write_checkpoint,
)
from minillm.model import Transformer

# The test tensors are tiny: one thread loses nothing, and avoids OpenMP threads thrashing on a
# shared 2-core box.
torch.set_num_threads(1)

# Small enough that writing a checkpoint takes milliseconds; every shape feature of Qwen3-0.6B
# is still there (GQA, head_dim * heads != hidden, QK-norm, tied head, 2 layers).
SMALL = dict(
    vocab_size=512,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)


@pytest.fixture(scope="session")
def model_path():
    return default_model_path()


@pytest.fixture(scope="session")
def tiny_default_path():
    return ensure_checkpoint(cache_dir() / TINY_NAME, TINY_CONFIG, seed=TINY_SEED)


@pytest.fixture(scope="session")
def model(model_path):
    return Transformer.from_pretrained(model_path)


@pytest.fixture(scope="session")
def tokenizer(model_path):
    return load_tokenizer(model_path)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """Factory: tiny_checkpoint(seed=0, with_tokenizer=False, **config_overrides) -> checkpoint
    folder."""
    made = {}

    def make(seed: int = 0, with_tokenizer: bool = False, **overrides):
        config = dict(SMALL, **overrides)
        key = (seed, with_tokenizer, json.dumps(config, sort_keys=True))
        if key not in made:
            folder = tmp_path_factory.mktemp("ckpt")
            made[key] = write_checkpoint(
                folder, config, seed=seed, with_tokenizer=with_tokenizer
            )
        return made[key]

    return make


@pytest.fixture(scope="session")
def tiny_model(tiny_checkpoint):
    """Factory: tiny_model(seed=0, dtype=torch.float32, **config_overrides) -> Transformer."""

    def make(seed: int = 0, dtype: torch.dtype = torch.float32, **overrides):
        return Transformer.from_pretrained(tiny_checkpoint(seed=seed, **overrides), dtype=dtype)

    return make


@pytest.fixture
def token_ids():
    """Factory: token_ids(n, vocab=512, seed=0) -> a seeded list of n random token ids."""

    def make(n: int, vocab: int = 512, seed: int = 0) -> list[int]:
        g = torch.Generator().manual_seed(seed)
        return torch.randint(0, vocab, (n,), generator=g).tolist()

    return make
