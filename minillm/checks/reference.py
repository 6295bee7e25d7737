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
# How many times transformers' own float32 rounding error (against float64) a float32 run may
# differ from it by. Two runs differ by at most the sum of their errors against float64, so 3
# holds whenever minillm's error is at most twice transformers'. minillm's packed oneDNN kernel
# rounds the projections differently from transformers' F.linear (MKL); chapter 1 prints the
# ratio of the two errors on SmolLM2's chat, and shows that with F.linear in its place the two
# agree bit for bit. A real difference (a wrong eps, theta or mask) is orders of magnitude
# larger.
ROUNDING_FACTOR = 3


@torch.no_grad()
def fp32_parity_bound(path, token_ids: list[int]) -> float:
    """1e-4, or ROUNDING_FACTOR times transformers' own float32 rounding error (against
    float64) if larger.

    A deep model's float32 logits carry rounding of about that size whoever computes them: over
    SmolLM2's 30 layers transformers itself is 9e-5 from the float64 answer on a 50-token chat.
    """
    own = hf_logits(path, token_ids).double() - hf_logits(path, token_ids, torch.float64)
    return rounding_bound(own.abs().max().item())


def rounding_bound(own_error: float) -> float:
    """The parity bound for a float32 run whose reference rounds by `own_error` against
    float64: the book's 1e-4, or ROUNDING_FACTOR times that error if larger."""
    return max(FP32_BOUND, ROUNDING_FACTOR * own_error)


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
