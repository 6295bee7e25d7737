"""generation_config.py — what a checkpoint says about generating: its end-of-sequence ids and
default sampling.

Hugging Face checkpoints carry two files. config.json describes the network, and may name an
`eos_token_id`; generation_config.json, when present, is what transformers' `generate` actually
uses: its `eos_token_id` (an int or a list: Qwen3 lists both `<|im_end|>` and `<|endoftext|>`)
and its recommended sampling (`temperature`, `top_k`, `top_p`, `max_new_tokens`). We follow both
tools:

- EOS ids: as transformers' generate takes them. When generation_config.json exists, its
  `eos_token_id` (none if it names none); without the file, config.json's. Generation stops at
  any of them.
- default sampling: the fields vLLM takes with `--generation-config auto` (its default), used
  when a request brings no SamplingParams of its own
  (`LLMEngine.get_default_sampling_params()`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from minillm.checking import check_float, check_int
from minillm.weights import describe, read_json

# generation_config.json field -> SamplingParams field, with the check each value must pass
SAMPLING_FIELDS = {
    "temperature": ("temperature", lambda name, v: check_float(name, v, min=0)),
    "top_k": ("top_k", lambda name, v: check_int(name, v, min=0)),
    "top_p": ("top_p", lambda name, v: check_float(name, v, min=0, min_inclusive=False, max=1)),
    "max_new_tokens": ("max_tokens", lambda name, v: check_int(name, v, min=1)),
}
NEUTRAL = {
    "repetition_penalty": 1.0,
    "min_p": 0.0,
}  # vLLM reads these too; minillm implements neither


@dataclass(frozen=True)
class GenerationConfig:
    eos_token_ids: tuple[int, ...] = ()  # generation stops at any of these (unless ignore_eos)
    sampling_defaults: dict = field(default_factory=dict)  # SamplingParams field -> value
    source: str = ""  # the file the EOS ids came from


def eos_token_ids(value, name: str) -> tuple[int, ...]:
    """An `eos_token_id` field (null, an int, or a list of ints) as a tuple of ids; errors name
    the field."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    if not items or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in items):
        raise ValueError(
            f"{name} is {describe(value)}: expected a token id (an int >= 0) or a list of them"
        )
    return tuple(dict.fromkeys(items))  # in order, without repeats


def read_generation_config(path: Path | str, config: dict | None = None) -> GenerationConfig:
    """The EOS ids and default sampling of the checkpoint folder `path` (config: its
    config.json, if read)."""
    path = Path(path)
    if config is None:
        config = read_json(path / "config.json", "a Hugging Face config.json")
    eos = eos_token_ids(config.get("eos_token_id"), f"eos_token_id in {path / 'config.json'}")
    source, defaults = str(path / "config.json"), {}
    file = path / "generation_config.json"
    if not file.exists():
        return GenerationConfig(eos, defaults, source)
    g = read_json(file, "a Hugging Face generation_config.json")
    if not isinstance(g, dict):
        raise ValueError(
            f"{file} holds {describe(g)}: expected a JSON object (a Hugging Face "
            "generation_config.json)"
        )
    # transformers reads the file as the whole generation config: config.json's eos no longer
    # counts
    eos, source = eos_token_ids(g.get("eos_token_id"), f"eos_token_id in {file}"), str(file)
    for key, (name, check) in SAMPLING_FIELDS.items():
        if g.get(key) is not None:
            defaults[name] = check(f"{key} in {file}", g[key])
    for key, neutral in NEUTRAL.items():
        if g.get(key) is not None and g[key] != neutral:
            warnings.warn(
                f"{file} sets {key}={g[key]!r}, which minillm does not implement; it is "
                "ignored",
                stacklevel=2,
            )
    return GenerationConfig(eos, defaults, source)
