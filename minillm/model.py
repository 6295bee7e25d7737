"""model.py — mini_llm: a Qwen3 decoder written from scratch in plain PyTorch.

Reads top to bottom: the config, the four building blocks (RMSNorm, RoPE, attention with GQA and
QK-norm, the SwiGLU MLP), the decoder stack, and loading a Hugging Face checkpoint. Module names
follow Hugging Face's Qwen3 (`embed_tokens`, `layers[i].self_attn.q_proj`, ...), so a checkpoint's
tensors load one to one once the `model.` prefix is dropped.

Shapes: B batch, T new tokens, S tokens in the cache after this step, d hidden size,
H query heads, KV key/value heads, hd head dim, V vocabulary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from minillm.checking import check_float, check_int
from minillm.generation_config import read_generation_config
from minillm.weights import check_safetensors_file, describe, few as _few, read_json, short, weight_files


@dataclass
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 40_960

    @property
    def hd(self) -> int:  # the short name the book uses
        return self.head_dim

    @classmethod
    def from_hf(cls, c: dict, source: str = "config.json") -> "ModelConfig":
        """From a config.json of transformers 4.x (`rope_theta`) or 5.x (`rope_parameters`).

        Every field is checked for type and range, and an error names the field and `source` (the file):
        a string "false" or a rope_theta of 0 would otherwise load and silently compute something else.
        """
        if not isinstance(c, dict):
            raise ValueError(f"{source} holds {describe(c)}: expected a JSON object with the model's fields "
                             "(a Hugging Face config.json)")
        required = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"]
        absent = [k for k in required if c.get(k) is None]
        if absent:
            raise ValueError(f"{source} lacks {', '.join(absent)}: expected a Qwen3 config with {', '.join(required)}")

        def field(name):
            return f"{name} in {source}"

        def flag(name, default):
            value = c.get(name, default)
            if value is None:
                return default
            if not isinstance(value, bool):  # "false" as a string is truthy: it must not silently mean true
                raise ValueError(f"{field(name)} is {value!r}: expected true or false (a JSON boolean)")
            return value

        ints = {k: check_int(field(k), c[k], min=1) for k in required}
        for name, default in [("num_key_value_heads", ints["num_attention_heads"]), ("head_dim", 128),
                              ("max_position_embeddings", 40_960)]:  # head_dim: Qwen3Config's default
            ints[name] = check_int(field(name), c[name], min=1) if c.get(name) is not None else default
        rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
        if not isinstance(rope, dict):
            raise ValueError(f"{field('rope_parameters')} is {short(rope)}: expected a JSON object or null")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ValueError(f"rope type {rope_type!r} is not supported; mini_llm implements default RoPE")
        theta = c.get("rope_theta", rope.get("rope_theta"))
        if theta is None:
            raise ValueError(f"{source} has neither 'rope_theta' nor 'rope_parameters.rope_theta'")
        theta = check_float(field("rope_theta"), theta, min=0, min_inclusive=False)  # 0 or less: NaN angles
        eps = c.get("rms_norm_eps")
        eps = 1e-6 if eps is None else check_float(field("rms_norm_eps"), eps, min=0, min_inclusive=False)
        if flag("attention_bias", False):
            raise ValueError(f"{source} sets attention_bias=true; Qwen3 has no attention biases and mini_llm none")
        if flag("use_sliding_window", False):
            raise ValueError(f"{source} sets use_sliding_window=true; mini_llm implements full attention only")
        return cls(**ints, rms_norm_eps=eps, rope_theta=theta,
                   tie_word_embeddings=flag("tie_word_embeddings", False))  # Qwen3Config's default: untied


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32 whatever the model dtype (as Qwen3 does)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables for rotary embeddings at the given positions: [T] -> ([T, hd], [T, hd]).

    Pair i of a head rotates by angle position * theta^(-2i/hd); the table repeats the angles for the
    two halves of the head, matching `rotate_half` below.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=positions.device) / head_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]  # [T, hd/2]
    emb = torch.cat([angles, angles], dim=-1)  # [T, hd]
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., T, heads, hd] by the angles of its positions; cos/sin broadcast as [T, 1, hd]."""
    return (x * cos + rotate_half(x) * sin).to(x.dtype)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """q [B, T, H, hd] attends to k, v [B, S, KV, hd] (S >= T): the T queries are the last T positions.

    The causal mask is aligned to the end ("bottom-right"): query i sits at position S - T + i and sees
    keys 0 .. S - T + i. GQA: each KV head serves H // KV consecutive query heads.
    """
    T, H, S, KV = q.shape[1], q.shape[2], k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // KV, dim=2)  # [B, S, H, hd]
    v = v.repeat_interleave(H // KV, dim=2)
    mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(diagonal=S - T)  # [T, S]
    o = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=scale
    )  # [B, H, T, hd]
    return o.transpose(1, 2)  # [B, T, H, hd]


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        if self.nh % self.nkv:
            raise ValueError(f"{self.nh} query heads cannot share {self.nkv} KV heads evenly")
        self.scale = self.hd**-0.5
        self.q_proj = nn.Linear(cfg.hidden_size, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.hd, cfg.rms_norm_eps)  # QK-norm: Qwen3 normalises each head
        self.k_norm = RMSNorm(self.hd, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, cache=None, layer_idx: int = 0):
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.nh, self.hd))  # norm before RoPE
        k = self.k_norm(self.k_proj(x).view(B, T, self.nkv, self.hd))
        v = self.v_proj(x).view(B, T, self.nkv, self.hd)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:  # store the new K/V and read back the whole history
            k, v = cache.update(layer_idx, k, v)  # [B, S, KV, hd]
        o = causal_attention(q, k, v, self.scale)  # [B, T, H, hd]
        return self.o_proj(o.reshape(B, T, self.nh * self.hd))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, cache=None, layer_idx: int = 0):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, layer_idx)
        return x + self.mlp(self.post_attention_layernorm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight  # one tensor, two roles

    def check_token_ids(self, input_ids: torch.Tensor) -> None:
        if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
            raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
        V = self.cfg.vocab_size
        bad = input_ids[(input_ids < 0) | (input_ids >= V)]
        if bad.numel():
            raise ValueError(f"token id {bad[0].item()} is outside the vocabulary: expected 0 <= id < {V}")

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, cache=None, last_only: bool = False) -> torch.Tensor:
        """input_ids [B, T] -> logits [B, T, V] ([B, 1, V] with last_only).

        Without a cache the T tokens are positions 0..T-1. With a cache (see kv_cache.py) they continue
        the cached sequence at positions cache.length .. cache.length + T - 1.
        """
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be [batch, tokens], got shape {tuple(input_ids.shape)}")
        self.check_token_ids(input_ids)
        start = cache.length if cache is not None else 0
        positions = torch.arange(start, start + input_ids.shape[1], device=input_ids.device)
        cos, sin = rope_cos_sin(positions, self.cfg.hd, self.cfg.rope_theta)  # [T, hd]
        x = self.embed_tokens(input_ids)  # [B, T, d]
        cos, sin = cos[:, None, :].to(x.dtype), sin[:, None, :].to(x.dtype)  # broadcast over heads
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache, i)
        if cache is not None:
            cache.advance(input_ids.shape[1])
        if last_only:
            x = x[:, -1:]
        return self.lm_head(self.norm(x))

    @classmethod
    def from_pretrained(cls, path, dtype: torch.dtype = torch.float32, device="cpu") -> "Transformer":
        """Load a Hugging Face Qwen3 checkpoint folder (config.json + safetensors, sharded or not)."""
        path = Path(path).expanduser()
        hf_config = read_config(path)
        cfg = ModelConfig.from_hf(hf_config, source=str(path / "config.json"))
        generation_config = read_generation_config(path, hf_config)  # EOS ids, default sampling
        state = load_safetensors(path)
        with torch.device("meta"):
            model = cls(cfg)
        expected = {k for k in model.state_dict() if not (cfg.tie_word_embeddings and k == "lm_head.weight")}
        if cfg.tie_word_embeddings:
            state.pop("lm_head.weight", None)  # some tied checkpoints store the head anyway
        missing, unexpected = sorted(expected - state.keys()), sorted(state.keys() - expected)
        if missing or unexpected:
            raise ValueError(
                f"checkpoint {path} does not match the Qwen3 config: "
                f"missing tensors {_few(missing)}, unexpected tensors {_few(unexpected)}"
            )
        own = model.state_dict()
        for name, t in state.items():
            if tuple(t.shape) != tuple(own[name].shape):
                raise ValueError(f"tensor {name} has shape {tuple(t.shape)}, config expects {tuple(own[name].shape)}")
        model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False, assign=True)
        if cfg.tie_word_embeddings:
            model.lm_head.weight = model.embed_tokens.weight
        model.generation_config = generation_config  # as transformers' models carry theirs
        return model.to(device).eval()


def read_config(path: Path) -> dict:
    """config.json of a checkpoint folder, as a dict; errors name the folder or file and what was expected."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(
            f"model folder {path} does not exist; point MINILLM_MODEL at a Qwen3 checkpoint folder "
            "or unset it to use the built-in tiny model"
        )
    file = path / "config.json"
    if not file.exists():
        raise FileNotFoundError(f"{path} has no config.json; expected a Hugging Face checkpoint folder")
    c = read_json(file, "a Hugging Face config.json")
    if not isinstance(c, dict):
        raise ValueError(f"{file} holds {describe(c)}: expected a JSON object (a Hugging Face config.json)")
    archs = c.get("architectures") or [c.get("model_type", "unknown")]
    if not isinstance(archs, list):
        archs = [archs]
    if "Qwen3ForCausalLM" not in archs and c.get("model_type") != "qwen3":
        raise ValueError(f"{path} holds a {archs[0]} checkpoint; mini_llm implements Qwen3ForCausalLM only")
    return c


def load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint folder, keyed by module name (the `model.` prefix dropped)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    state = {}
    for f in weight_files(path):
        check_safetensors_file(f)
        try:
            tensors = load_file(str(f))
        except SafetensorError as e:
            raise ValueError(f"{f} cannot be read as safetensors ({e}); copy or download it again") from None
        for name, t in tensors.items():
            state[name.removeprefix("model.")] = t
    return state

