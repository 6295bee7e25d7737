"""checks/reference.py — the external reference: Hugging Face transformers' model
(Qwen3ForCausalLM or LlamaForCausalLM, as config.json says) on the same folder.

Every parity claim in the book compares minillm against this, on the same checkpoint files.
"""

from __future__ import annotations

from functools import lru_cache

import torch


@lru_cache(maxsize=4)
def hf_model(path: str, dtype: torch.dtype = torch.float32, device: str = "cpu"):
    """transformers' own implementation of the folder's architecture (cached per folder)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).to(device).eval()


@torch.no_grad()
def hf_logits(
    path, token_ids: list[int], dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> torch.Tensor:
    """Logits [T, V] of transformers' model for one sequence."""
    model = hf_model(str(path), dtype, device)
    return model(torch.tensor([token_ids], device=device)).logits[0]


FP32_BOUND = 1e-4  # the book's float32 parity threshold
# How many times transformers' own float32 rounding error (its float32 logits against its
# float64 ones) minillm's float32 logits may be from that float64 answer. Both are float32 runs
# of the same maths, so their errors have one size; but minillm's packed oneDNN kernel rounds
# the projections in another order than transformers' F.linear (MKL), and the ratio of the two
# errors moves with the tokens: chapter 1 prints it over 15 inputs of SmolLM2 (1.4 to 3.5). 6
# leaves a margin of 1.7x over the largest; a real bug (a wrong eps, theta or RoPE layout) is
# hundreds of times past the bound (chapter 1 plants four).
ROUNDING_FACTOR = 6


@torch.no_grad()
def hf_rounding_error(path, token_ids: list[int]) -> float:
    """max |transformers' float32 logits - its float64 logits|: how much a float32 run of this
    model rounds on these tokens (4e-5 to 9e-5 on the SmolLM2 inputs chapter 1 prints)."""
    own = hf_logits(path, token_ids).double() - hf_logits(path, token_ids, torch.float64)
    return own.abs().max().item()


def float64_bound(own_error: float) -> float:
    """Bound on max |minillm float32 - transformers float64|, for a reference that rounds by
    `own_error`: the book's 1e-4, or ROUNDING_FACTOR times that error if larger."""
    return max(FP32_BOUND, ROUNDING_FACTOR * own_error)


def rounding_bound(own_error: float) -> float:
    """Bound on max |minillm float32 - transformers float32|: the two errors against float64
    add, so 1 + ROUNDING_FACTOR times the reference's own error, or the book's 1e-4."""
    return max(FP32_BOUND, (1 + ROUNDING_FACTOR) * own_error)


def fp64_parity_bound(path, token_ids: list[int]) -> float:
    """`float64_bound` for these tokens: compare minillm's float32 logits with
    `hf_logits(path, token_ids, torch.float64)`."""
    return float64_bound(hf_rounding_error(path, token_ids))


def fp32_parity_bound(path, token_ids: list[int]) -> float:
    """`rounding_bound` for these tokens: compare minillm's float32 logits with transformers'
    float32 ones (`hf_logits(path, token_ids)`). Never below 1e-4; transformers' own float32
    rounding raises it on the tiny model and more on a deep one (chapter 1 prints both)."""
    return rounding_bound(hf_rounding_error(path, token_ids))


@torch.no_grad()
def hf_generate(path, token_ids: list[int], max_new_tokens: int) -> list[int]:
    """Greedy continuation by transformers' generate (fp32, CPU); stops at max_new_tokens
    only."""
    model = hf_model(str(path))
    ids = torch.tensor([token_ids])
    # An explicit all-ones mask: without one, generate masks out every prompt token equal to
    # pad_token_id.
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        min_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=0,
    )
    return out[0, len(token_ids) :].tolist()
