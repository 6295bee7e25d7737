"""ModelRunner.forward as a function: one flat batch of prefills, decodes and chunks through the model."""

import torch

from minillm.model import apply_rope, rope_cos_sin  # noqa: F401  (you will need them)
from minillm.paged import paged_attention  # noqa: F401


@torch.no_grad()
def runner_forward(model, kv, batch) -> torch.Tensor:
    """model: minillm Transformer; kv: PagedKVCache; batch: BatchInput -> logits [M, vocab] at batch.logits_indices."""
    cfg = model.cfg
    heads, kv_heads, head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    N = batch.input_ids.shape[0]
    h = model.embed_tokens(batch.input_ids)  # [N, hidden]
    cos, sin = rope_cos_sin(batch.positions, head_dim, cfg.rope_theta)  # each token at its own position
    cos, sin = cos[:, None, :].to(h.dtype), sin[:, None, :].to(h.dtype)  # [N, 1, hd]
    for layer_index, layer in enumerate(model.layers):
        attn = layer.self_attn
        normed = layer.input_layernorm(h)
        q = apply_rope(attn.q_norm(attn.q_proj(normed).view(N, heads, head_dim)), cos, sin)
        k = apply_rope(attn.k_norm(attn.k_proj(normed).view(N, kv_heads, head_dim)), cos, sin)
        v = attn.v_proj(normed).view(N, kv_heads, head_dim)
        kv.write(layer_index, batch.slot_mapping, k, v)  # every new token, sampled or not
        o = paged_attention(q, kv, layer_index, batch.block_tables, batch.seq_lens, batch.query_start_loc,
                            head_dim**-0.5)  # [N, heads, hd]
        h = h + attn.o_proj(o.reshape(N, heads * head_dim))
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    last = h[batch.logits_indices]  # [M, hidden]: only where a token is sampled
    return model.lm_head(model.norm(last))
