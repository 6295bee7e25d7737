"""A contiguous KV cache that minillm's Transformer uses as its attention backend, and greedy
generation with it."""

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
        raise NotImplementedError("KVCache.__init__")

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, T, KV, hd] after the layer's history; return the whole history [B,
        length + T, KV, hd]."""
        raise NotImplementedError("KVCache.update")

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """The backend's call from the model: store the new K/V, then let q [B, T, H, hd] see
        the whole history."""
        raise NotImplementedError("KVCache.attend")

    def advance(self, n: int) -> None:
        """Count n more tokens as stored (once per forward, after every layer has stored
        them)."""
        raise NotImplementedError("KVCache.advance")


def generate(
    model, prompt_ids: list[int], max_new_tokens: int, eos: int | None = None
) -> list[int]:
    """Greedy decoding: one prefill over the prompt, then one single-token decode step per new
    token."""
    raise NotImplementedError("generate")
