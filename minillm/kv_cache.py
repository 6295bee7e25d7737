"""kv_cache.py — a contiguous per-sequence KV cache, prefill vs decode, and greedy generation.

Without a cache, producing token t+1 re-runs the model over all t tokens. Keys and values of
past tokens never change (the mask is causal), so we keep them: prefill runs the prompt once and
fills the cache; each decode step runs just the one new token and reads the rest from the cache.
"""

from __future__ import annotations

import torch

from minillm.checking import check_int, check_int_list
from minillm.model import Transformer, causal_attention


class KVCache:
    """Per layer, K and V buffers [B, max_len, kv_heads, hd] and the number of tokens stored so
    far.

    An attention backend for `Transformer.forward`: each layer's `attend` stores the new K/V
    after the history and attends over all of it. The caller gives the new tokens' positions
    and, once the whole forward is done, counts them with `advance` (`forward_cached` does
    both).
    """

    def __init__(
        self,
        num_layers: int,
        max_len: int,
        num_kv_heads: int,
        head_dim: int,
        batch_size: int = 1,
        dtype=torch.float32,
        device="cpu",
    ):
        num_layers, max_len = (
            check_int("num_layers", num_layers, min=1),
            check_int("max_len", max_len, min=1),
        )
        shape = (
            check_int("batch_size", batch_size, min=1),
            max_len,
            check_int("num_kv_heads", num_kv_heads, min=1),
            check_int("head_dim", head_dim, min=1),
        )
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.max_len = max_len
        self.length = 0  # tokens stored; the next token's position

    @classmethod
    def for_model(cls, model: Transformer, max_len: int, batch_size: int = 1) -> KVCache:
        cfg, p = model.cfg, model.embed_tokens.weight
        return cls(
            cfg.num_hidden_layers,
            max_len,
            cfg.num_key_value_heads,
            cfg.hd,
            batch_size,
            p.dtype,
            p.device,
        )

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Write k, v [B, T, KV, hd] at positions length..length+T-1; return all [B, length+T,
        KV, hd]."""
        if k.shape[0] != self.k[layer].shape[0]:
            raise ValueError(
                f"a batch of {k.shape[0]} sequences was given to a cache built for "
                f"{self.k[layer].shape[0]}"
            )
        end = self.length + k.shape[1]
        if end > self.max_len:
            raise ValueError(
                f"the cache holds {self.max_len} tokens; position {end - 1} does not fit"
            )
        self.k[layer][:, self.length : end] = k
        self.v[layer][:, self.length : end] = v
        return self.k[layer][:, :end], self.v[layer][:, :end]

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """The backend's one job: store this layer's new K/V, then let the new queries see the
        whole history."""
        k_all, v_all = self.update(layer, k, v)  # [B, S, KV, hd]
        return causal_attention(q, k_all, v_all, scale)  # [B, T, H, hd]

    def advance(self, n: int) -> None:
        """Count n more tokens as stored, once every layer has written them."""
        self.length += n

    def bytes_per_token(self) -> int:
        k = self.k[0]
        return kv_bytes_per_token(len(self.k), k.shape[2], k.shape[3], k.element_size())


def kv_bytes_per_token(
    num_layers: int, num_kv_heads: int, head_dim: int, bytes_per_element: int = 2
) -> int:
    """KV cache bytes one token costs: K and V, in every layer, for every KV head. The book's
    one formula."""
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_element


def forward_cached(
    model: Transformer, cache, input_ids: torch.Tensor, last_only: bool = True
) -> torch.Tensor:
    """Run T new tokens [B, T] after the cache's history; return the logits [B, V] of the last
    one.

    The new tokens sit at positions cache.length .. cache.length + T - 1; the cache counts them
    once the forward is done. With last_only=False, the logits of every new token [B, T, V].
    """
    T = input_ids.shape[-1]
    # checked before any layer writes, so a failed call changes nothing
    if cache.length + T > cache.max_len:
        raise ValueError(
            f"the cache holds {cache.max_len} tokens; position {cache.length + T - 1} does "
            "not fit"
        )
    # the loop reads every token back anyway: one more host read costs nothing
    model.check_token_ids(input_ids)
    positions = torch.arange(cache.length, cache.length + T, device=input_ids.device)  # [T]
    logits = model(input_ids, positions, cache, logits_indices=[-1] if last_only else None)
    cache.advance(T)
    return logits[:, -1] if last_only else logits


@torch.no_grad()
def generate(
    model: Transformer,
    prompt_ids: list[int],
    max_new_tokens: int,
    eos: int | None = None,
    return_logits: bool = False,
):
    """Greedy decoding with a KV cache: one prefill over the prompt, then one token per decode
    step.

    Returns the new token ids (stopping after `eos` if given); with return_logits also the [V]
    logits each new token was chosen from.
    """
    prompt_ids = _check_prompt(model, prompt_ids, max_new_tokens)
    device = model.embed_tokens.weight.device
    cache = KVCache.for_model(model, max_len=len(prompt_ids) + max_new_tokens)
    prompt = torch.tensor([prompt_ids], device=device)  # [1, P]
    logits = forward_cached(model, cache, prompt)[0]  # prefill: [V]
    new_ids, all_logits = [], []
    while True:
        token = int(logits.argmax())
        new_ids.append(token)
        all_logits.append(logits)
        if token == eos or len(new_ids) == max_new_tokens:
            break
        step = torch.tensor([[token]], device=device)  # [1, 1]
        logits = forward_cached(model, cache, step)[0]  # decode, one token: [V]
    return (new_ids, torch.stack(all_logits)) if return_logits else new_ids


@torch.no_grad()
def generate_without_cache(
    model: Transformer, prompt_ids: list[int], max_new_tokens: int, eos: int | None = None
) -> list[int]:
    """The naive loop: every step re-runs the whole sequence. Same tokens, quadratic work."""
    ids = _check_prompt(model, prompt_ids, max_new_tokens)
    device = model.embed_tokens.weight.device
    n = len(ids)
    for _ in range(max_new_tokens):
        token = int(
            model(torch.tensor([ids], device=device), logits_indices=[-1])[0, -1].argmax()
        )
        ids.append(token)
        if token == eos:
            break
    return ids[n:]


def _check_prompt(model: Transformer, prompt_ids, max_new_tokens) -> list[int]:
    ids = check_int_list("prompt_ids", prompt_ids)
    if not ids:
        raise ValueError("prompt_ids is empty: expected at least one token")
    model.check_token_ids(ids)
    check_int("max_new_tokens", max_new_tokens, min=1)
    return ids
