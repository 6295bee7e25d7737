"""checks/reference.py — the external reference: Hugging Face transformers' model
(Qwen3ForCausalLM or
LlamaForCausalLM, as config.json says) on the same folder.

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
