"""Wrong: counts the new tokens in attend, so every layer after the first writes further along.

Caught by: test_decode_steps_match_a_full_recompute.
"""

import torch

from minillm.kv_cache import forward_cached  # noqa: F401  (you will need them)
from minillm.model import causal_attention  # noqa: F401


class KVCache:
    """Per layer, K and V buffers [batch_size, max_len, num_kv_heads, head_dim]; `length` tokens
    stored so far."""

    def __init__(
        self,
        num_layers: int,
        max_len: int,
        num_kv_heads: int,
        head_dim: int,
        batch_size: int = 1,
        dtype: torch.dtype = torch.float32,
    ):
        shape = (batch_size, max_len, num_kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(num_layers)]
        self.max_len = max_len
        self.length = 0

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, T, KV, hd] after the layer's history; return the whole history [B,
        length + T, KV, hd]."""
        end = self.length + k.shape[1]
        if end > self.max_len:
            raise ValueError(
                f"{k.shape[1]} new tokens after {self.length} do not fit in "
                f"max_len={self.max_len}"
            )
        self.k[layer][:, self.length : end] = k
        self.v[layer][:, self.length : end] = v
        return self.k[layer][:, :end], self.v[layer][:, :end]

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """The backend's call from the model: store the new K/V, then let q [B, T, H, hd] see
        the whole history."""
        k_all, v_all = self.update(layer, k, v)  # [B, length + T, KV, hd]
        self.length += k.shape[1]  # too early: the next layer writes after these
        return causal_attention(
            q, k_all, v_all, scale
        )  # the new tokens are the last T positions

    def advance(self, n: int) -> None:
        """Counting is done in attend already."""


def generate(
    model, prompt_ids: list[int], max_new_tokens: int, eos: int | None = None
) -> list[int]:
    """Greedy decoding: one prefill over the prompt, then one single-token decode step per new
    token."""
    cfg = model.cfg
    cache = KVCache(
        cfg.num_hidden_layers,
        len(prompt_ids) + max_new_tokens,
        cfg.num_key_value_heads,
        cfg.head_dim,
    )
    logits = forward_cached(
        model, cache, torch.tensor([prompt_ids])
    )  # prefill: [1, V], the last token's
    new_ids = []
    while True:
        token = int(logits[0].argmax())
        new_ids.append(token)
        if len(new_ids) == max_new_tokens:
            return new_ids
        if token == eos:
            return new_ids
        logits = forward_cached(model, cache, torch.tensor([[token]]))  # decode: one token
