"""prompts.py — what the engine accepts as a prompt, and as many prompts, checked in one place.

A prompt is a string (tokenized with the engine's tokenizer) or token ids: a list or tuple of
ints, a 1-D numpy array or a 1-D tensor. `generate` and `stream` take one prompt or any iterable
of prompts (a list, a generator, the rows of a 2-D array). Like vLLM's TextPrompt and
TokensPrompt, a prompt may also be a dict with "prompt" (text) or "prompt_token_ids", and an
optional "cache_salt" for the prefix cache (chapter 7). Every form becomes a plain list of ints
here, so `add_request`, `generate` and `stream` accept exactly the same things and reject the
rest with one message.
"""

from __future__ import annotations

from minillm.checking import as_int, check_int_list

PROMPT = "a string, a list of token ids, or a 1-D array or tensor of them"


def prompt_ids(prompt, tokenizer, vocab_size: int) -> list[int]:
    """One prompt as a list of token ids in [0, vocab_size)."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError(
                "this engine has no tokenizer, so prompts must be lists of token ids"
            )
        return list(tokenizer(prompt).input_ids)
    if prompt is None or isinstance(prompt, (bytes, dict)) or not hasattr(prompt, "__iter__"):
        raise ValueError(f"prompt is {_show(prompt)}: expected {PROMPT}")
    if getattr(prompt, "ndim", 1) != 1:
        raise ValueError(f"prompt has shape {tuple(prompt.shape)}: expected {PROMPT}")
    if hasattr(
        prompt, "tolist"
    ):  # arrays and tensors: one conversion, not one Python object per element
        prompt = prompt.tolist()
    ids = check_int_list("prompt", prompt, min=0)
    bad = next((i for i, t in enumerate(ids) if t >= vocab_size), None)
    if bad is not None:
        raise ValueError(
            f"prompt[{bad}] is token id {ids[bad]}: expected an id < {vocab_size} (the "
            "model's vocabulary)"
        )
    return ids


def split_cache_salt(prompt):
    """(prompt, cache_salt): a dict's "prompt" or "prompt_token_ids" and its "cache_salt"; any
    other prompt, as is."""
    if not isinstance(prompt, dict):
        return prompt, None
    if set(prompt) - {"prompt", "prompt_token_ids", "cache_salt"} or ("prompt" in prompt) == (
        "prompt_token_ids" in prompt
    ):
        raise ValueError(
            f"prompt is {_show(prompt)}: expected a dict with one of 'prompt' (text) or "
            "'prompt_token_ids', and optionally 'cache_salt'"
        )
    salt = prompt.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise ValueError(
            f"cache_salt is {salt!r}: expected a non-empty string, or no cache_salt"
        )
    return prompt.get("prompt", prompt.get("prompt_token_ids")), salt


def split_prompts(prompts) -> list:
    """One prompt or many, as a list of prompts: a string, a dict or a sequence of ints is one
    prompt."""
    if prompts is None or isinstance(prompts, bytes):
        raise ValueError(
            f"prompts is {_show(prompts)}: expected one prompt ({PROMPT}) or an iterable of "
            "prompts"
        )
    if isinstance(prompts, (str, dict)):
        return [prompts]
    ndim = getattr(prompts, "ndim", None)
    if ndim is not None:  # a numpy array or a tensor: 1-D is one prompt, 2-D one prompt per row
        if ndim not in (1, 2):
            raise ValueError(
                f"prompts has shape {tuple(prompts.shape)}: expected 1-D (one prompt) or 2-D "
                "(one per row)"
            )
        return [prompts] if ndim == 1 else list(prompts)
    if not hasattr(prompts, "__iter__"):
        raise ValueError(
            f"prompts is {_show(prompts)}: expected one prompt ({PROMPT}) or an iterable of "
            "prompts"
        )
    items = list(prompts)  # a generator is consumed once, here
    if items and as_int(items[0]) is not None:
        return [items]  # token ids: a single prompt
    return items


def _show(value, n: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[:n] + "..."
