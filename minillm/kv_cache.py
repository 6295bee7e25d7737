"""kv_cache.py — a contiguous per-sequence KV cache, prefill vs decode, and greedy generation.

Without a cache, producing token t+1 re-runs the model over all t tokens. Keys and values of past
tokens never change (the mask is causal), so we keep them: prefill runs the prompt once and fills
the cache; each decode step runs just the one new token and reads the rest from the cache.
"""

from __future__ import annotations

import torch

from minillm.model import Transformer


class KVCache:
    """Per layer, K and V buffers [B, max_len, kv_heads, hd] and the number of tokens stored so far."""

    def __init__(self, num_layers: int, max_len: int, num_kv_heads: int, head_dim: int,
                 batch_size: int = 1, dtype=torch.float32, device="cpu"):
        shape = (batch_size, max_len, num_kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.max_len = max_len
        self.length = 0  # tokens stored; the next token's position

    @classmethod
    def for_model(cls, model: Transformer, max_len: int, batch_size: int = 1) -> "KVCache":
        cfg, p = model.cfg, model.embed_tokens.weight
        return cls(cfg.num_hidden_layers, max_len, cfg.num_key_value_heads, cfg.hd, batch_size, p.dtype, p.device)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Write k, v [B, T, KV, hd] at positions length..length+T-1; return all [B, length+T, KV, hd]."""
        if k.shape[0] != self.k[layer].shape[0]:
            raise ValueError(f"a batch of {k.shape[0]} sequences was given to a cache built for {self.k[layer].shape[0]}")
        end = self.length + k.shape[1]
        if end > self.max_len:
            raise ValueError(f"the cache holds {self.max_len} tokens; position {end - 1} does not fit")
        self.k[layer][:, self.length:end] = k
        self.v[layer][:, self.length:end] = v
        return self.k[layer][:, :end], self.v[layer][:, :end]

    def advance(self, n: int) -> None:
        """Called by the model once every layer has stored its n new tokens."""
        self.length += n

    def bytes_per_token(self) -> int:
        """K and V, every layer: 2 * layers * kv_heads * hd * bytes per element."""
        k = self.k[0]
        return 2 * len(self.k) * k.shape[2] * k.shape[3] * k.element_size()


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, bytes_per_element: int = 2) -> int:
    """KV cache bytes one token costs: K and V, in every layer, for every KV head."""
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_element


@torch.no_grad()
def generate(model: Transformer, prompt_ids: list[int], max_new_tokens: int, eos: int | None = None,
             return_logits: bool = False):
    """Greedy decoding with a KV cache: one prefill over the prompt, then one token per decode step.

    Returns the new token ids (stopping after `eos` if given); with return_logits also the [V] logits
    each new token was chosen from.
    """
    if not prompt_ids:
        raise ValueError("prompt_ids is empty: expected at least one token")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens is {max_new_tokens}: expected at least 1")
    device = model.embed_tokens.weight.device
    cache = KVCache.for_model(model, max_len=len(prompt_ids) + max_new_tokens)
    logits = model(torch.tensor([prompt_ids], device=device), cache, last_only=True)[0, -1]  # prefill
    new_ids, all_logits = [], []
    while True:
        token = int(logits.argmax())
        new_ids.append(token)
        all_logits.append(logits)
        if token == eos or len(new_ids) == max_new_tokens:
            break
        logits = model(torch.tensor([[token]], device=device), cache)[0, -1]  # decode: one token
    return (new_ids, torch.stack(all_logits)) if return_logits else new_ids


@torch.no_grad()
def generate_without_cache(model: Transformer, prompt_ids: list[int], max_new_tokens: int,
                           eos: int | None = None) -> list[int]:
    """The naive loop: every step re-runs the whole sequence. Same tokens, quadratic work."""
    if not prompt_ids:
        raise ValueError("prompt_ids is empty: expected at least one token")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens is {max_new_tokens}: expected at least 1")
    device = model.embed_tokens.weight.device
    ids = list(prompt_ids)
    for _ in range(max_new_tokens):
        token = int(model(torch.tensor([ids], device=device), last_only=True)[0, -1].argmax())
        ids.append(token)
        if token == eos:
            break
    return ids[len(prompt_ids):]
