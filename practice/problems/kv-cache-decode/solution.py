"""A contiguous KV cache that minillm's Transformer can use, and greedy generation with it."""

import torch


class KVCache:
    """Per layer, K and V buffers [batch_size, max_len, num_kv_heads, head_dim]; `length` tokens stored so far."""

    def __init__(self, num_layers: int, max_len: int, num_kv_heads: int, head_dim: int,
                 batch_size: int = 1, dtype: torch.dtype = torch.float32):
        shape = (batch_size, max_len, num_kv_heads, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype) for _ in range(num_layers)]
        self.max_len = max_len
        self.length = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [B, T, KV, hd] after the layer's history; return the whole history [B, length + T, KV, hd]."""
        end = self.length + k.shape[1]
        if end > self.max_len:
            raise ValueError(f"{k.shape[1]} new tokens after {self.length} do not fit in {self.max_len} positions")
        self.keys[layer][:, self.length:end] = k
        self.values[layer][:, self.length:end] = v
        return self.keys[layer][:, :end], self.values[layer][:, :end]

    def advance(self, n: int) -> None:
        """Count n more tokens as stored (the model calls this once per forward, after every layer)."""
        self.length += n


def generate(model, prompt_ids: list[int], max_new_tokens: int, eos: int | None = None) -> list[int]:
    """Greedy decoding: one prefill over the prompt, then one single-token decode step per new token."""
    cfg = model.cfg
    cache = KVCache(cfg.num_hidden_layers, len(prompt_ids) + max_new_tokens, cfg.num_key_value_heads, cfg.head_dim)
    logits = model(torch.tensor([prompt_ids]), cache, last_only=True)  # prefill
    new_ids = []
    while True:
        token = int(logits[0, -1].argmax())
        new_ids.append(token)
        if token == eos or len(new_ids) == max_new_tokens:
            return new_ids
        logits = model(torch.tensor([[token]]), cache)  # decode: one token, the rest comes from the cache
