"""model.py — mini_llm: a Qwen3 decoder (and Llama, its parent) from scratch in plain PyTorch.

Reads top to bottom: the config, the four building blocks (RMSNorm, RoPE, attention with GQA and
QK-norm, the SwiGLU MLP), the decoder stack, and loading a Hugging Face checkpoint. Module names
follow Hugging Face's Qwen3 (`embed_tokens`, `layers[i].self_attn.q_proj`, ...), so a
checkpoint's tensors load one to one once the `model.` prefix is dropped. A Llama checkpoint
(SmolLM2, see smollm2.py) runs the same forward: it differs by having no QK-norm (and by its
config's numbers).

`Transformer.forward` is the one seam of the book: every later chapter runs this same forward
and only passes another attention backend (a KV cache, fixed slots, a paged cache, a Triton
kernel).

Shapes: B batch, T new tokens, N tokens of a flat batch, S tokens in the cache after this step,
d hidden size, H query heads, KV key/value heads, hd head dim, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from minillm.checking import as_int, check_float, check_int
from minillm.generation_config import read_generation_config
from minillm.linear import linear, packable, packed_weight, unpack
from minillm.parallel.layers import (
    ColumnParallelLinear,
    ParallelLMHead,
    RowParallelLinear,
    TensorParallelGroup,
    VocabParallelEmbedding,
    check_tp_size,
    kv_heads_of_rank,
    load_shard,
)
from minillm.weights import describe, load_safetensors, read_config, short  # noqa: F401 (re-exported)
from minillm.weights import few as _few


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
    qk_norm: bool = True  # Qwen3 normalises each query and key head before RoPE; Llama does not

    @property
    def hd(self) -> int:  # the short name the book uses
        return self.head_dim

    @classmethod
    def from_hf(cls, c: dict, source: str = "config.json") -> ModelConfig:
        """From a config.json of transformers 4.x (`rope_theta`) or 5.x (`rope_parameters`).

        Every field is checked for type and range, and an error names the field and `source`
        (the file): a string "false" or a rope_theta of 0 would otherwise load and silently
        compute something else.
        """
        if not isinstance(c, dict):
            raise ValueError(
                f"{source} holds {describe(c)}: expected a JSON object with the model's fields "
                "(a Hugging Face config.json)"
            )
        family = model_family(c, source)
        required = [
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
        ]
        absent = [k for k in required if c.get(k) is None]
        if absent:
            raise ValueError(
                f"{source} lacks {', '.join(absent)}: expected a {family} config with "
                f"{', '.join(required)}"
            )

        def field(name):
            return f"{name} in {source}"

        def flag(name, default):
            value = c.get(name, default)
            if value is None:
                return default
            if not isinstance(
                value, bool
            ):  # "false" as a string is truthy: it must not silently mean true
                raise ValueError(
                    f"{field(name)} is {value!r}: expected true or false (a JSON boolean)"
                )
            return value

        ints = {k: check_int(field(k), c[k], min=1) for k in required}
        head_dim = (
            128 if family == "qwen3" else ints["hidden_size"] // ints["num_attention_heads"]
        )
        # head_dim: Qwen3Config's default, or LlamaConfig's (hidden / heads)
        for name, default in [
            ("num_key_value_heads", ints["num_attention_heads"]),
            ("head_dim", head_dim),
            ("max_position_embeddings", 40_960),
        ]:
            ints[name] = (
                check_int(field(name), c[name], min=1) if c.get(name) is not None else default
            )
        rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
        if not isinstance(rope, dict):
            raise ValueError(
                f"{field('rope_parameters')} is {short(rope)}: expected a JSON object or null"
            )
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            which = "rope_parameters" if c.get("rope_parameters") else "rope_scaling"
            raise ValueError(
                f"rope type {rope_type!r} is not supported ({which} in {source}); "
                "mini_llm implements default RoPE"
            )
        theta = c.get("rope_theta", rope.get("rope_theta"))
        if theta is None:
            raise ValueError(
                f"{source} has neither 'rope_theta' nor 'rope_parameters.rope_theta'"
            )
        theta = check_float(
            field("rope_theta"), theta, min=0, min_inclusive=False
        )  # 0 or less: NaN angles
        eps = c.get("rms_norm_eps")
        eps = (
            1e-6
            if eps is None
            else check_float(field("rms_norm_eps"), eps, min=0, min_inclusive=False)
        )
        if flag("attention_bias", False):
            raise ValueError(
                f"{source} sets attention_bias=true; Qwen3 has no attention biases and "
                "mini_llm none"
            )
        if flag("mlp_bias", False):
            raise ValueError(f"{source} sets mlp_bias=true; mini_llm's MLP has no biases")
        if c.get("hidden_act", "silu") != "silu":
            raise ValueError(
                f"hidden_act in {source} is {short(c.get('hidden_act'))}: mini_llm "
                "implements silu"
            )
        if flag("use_sliding_window", False):
            raise ValueError(
                f"{source} sets use_sliding_window=true; mini_llm implements full attention "
                "only"
            )
        return cls(
            **ints,
            rms_norm_eps=eps,
            rope_theta=theta,
            qk_norm=family == "qwen3",
            tie_word_embeddings=flag("tie_word_embeddings", False),
        )  # both default to untied


FAMILIES = {
    "Qwen3ForCausalLM": "qwen3",
    "LlamaForCausalLM": "llama",
}  # architectures -> model_type


def model_family(c: dict, source: str = "config.json") -> str:
    """ "qwen3" or "llama", from the config's `architectures` (else its `model_type`); others
    are
    refused."""
    archs = c.get("architectures")
    archs = archs if isinstance(archs, list) else [archs] if archs else []
    for arch in archs:
        if arch in FAMILIES:
            return FAMILIES[arch]
    if not archs and c.get("model_type") in FAMILIES.values():
        return c["model_type"]
    named = (
        f"architectures {short(archs)}" if archs else f"model_type {short(c.get('model_type'))}"
    )
    raise ValueError(f"{named} in {source}: mini_llm implements {' and '.join(FAMILIES)} only")


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


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables for rotary embeddings at the given positions: [T] -> ([T, hd], [T,
    hd]).

    Pair i of a head rotates by angle position * theta^(-2i/hd); the table repeats the angles
    for the two halves of the head, matching `rotate_half` below.
    """
    inv_freq = 1.0 / (
        theta
        ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=positions.device) / head_dim)
    )
    angles = positions.float()[:, None] * inv_freq[None, :]  # [T, hd/2]
    emb = torch.cat([angles, angles], dim=-1)  # [T, hd]
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., T, heads, hd] by the angles of its positions; cos/sin broadcast as [T, 1,
    hd]."""
    return (x * cos + rotate_half(x) * sin).to(x.dtype)


def causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> torch.Tensor:
    """q [B, T, H, hd] attends to k, v [B, S, KV, hd] (S >= T): the T queries are the last T
    positions.

    The causal mask is aligned to the end ("bottom-right"): query i sits at position S - T + i
    and sees keys 0 .. S - T + i. GQA: each KV head serves H // KV consecutive query heads.
    """
    T, H, S, KV = q.shape[1], q.shape[2], k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // KV, dim=2)  # [B, S, H, hd]
    v = v.repeat_interleave(H // KV, dim=2)
    mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(diagonal=S - T)  # [T, S]
    o = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=scale
    )  # [B, H, T, hd]
    return o.transpose(1, 2)  # [B, T, H, hd]


class DenseAttention:
    """The attention backend without a cache: the given tokens attend to each other only,
    causally.

    An attention backend is anything with `attend(layer, q, k, v, scale)`: it receives one
    layer's new queries, keys and values and returns the attention output shaped like q. Chapter
    2's KV cache, chapter 3's slots and chapter 4's paged cache are backends too; the model
    never changes.
    """

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        if q.dim() == 3:  # flat [N, H, hd]: one sequence of N tokens
            return causal_attention(q[None], k[None], v[None], scale)[0]
        return causal_attention(q, k, v, scale)  # [B, T, H, hd]


def pack_for_cpu(model: nn.Module) -> int:
    """Pack every projection weight of `model` for oneDNN now, not at its first product, and
    drop
    the packed copies of weights that left the CPU. Returns the bytes the packed copies hold
    (a tied weight counts once): memory on top of the plain weights, which the embedding and
    `state_dict` read."""
    packed = {}
    for m in model.modules():
        if not isinstance(m, PROJECTIONS):
            continue
        w = m.weight
        if packable(w):
            packed[id(w)] = torch.ops.mkldnn._nbytes(packed_weight(w))
    for (
        p
    ) in model.parameters():  # off the CPU, or no longer a projection's weight: free its copy
        if id(p) not in packed:
            unpack(p)
    return sum(packed.values())


class Linear(nn.Linear):
    """nn.Linear without bias whose product goes through `linear` (same parameters, same
    checkpoint names)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight)


# the layers whose weight goes through `linear`, so pack_for_cpu packs it
PROJECTIONS = (Linear, ColumnParallelLinear, RowParallelLinear, ParallelLMHead)


def column_linear(
    in_features: int, out_features: int, tp: TensorParallelGroup | None
) -> nn.Module:
    """q, k, v, gate, up: the plain layer, or (chapter 10) this rank's output columns of it."""
    return (
        Linear(in_features, out_features)
        if tp is None
        else ColumnParallelLinear(in_features, out_features, tp)
    )


def row_linear(
    in_features: int, out_features: int, tp: TensorParallelGroup | None
) -> nn.Module:
    """o, down: the plain layer, or (chapter 10) this rank's input rows of it followed by an
    all-reduce."""
    return (
        Linear(in_features, out_features)
        if tp is None
        else RowParallelLinear(in_features, out_features, tp)
    )


class Attention(nn.Module):
    def __init__(
        self, cfg: ModelConfig, layer_idx: int = 0, tp: TensorParallelGroup | None = None
    ):
        super().__init__()
        self.nh, self.nkv, self.hd = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        )
        if self.nh % self.nkv:
            raise ValueError(f"{self.nh} query heads cannot share {self.nkv} KV heads evenly")
        if tp is not None:  # tensor parallel: this rank's heads only (chapter 10)
            self.nh = self.nh // check_tp_size(cfg, tp.size)
            self.nkv = len(kv_heads_of_rank(self.nkv, tp.rank, tp.size))
        self.layer_idx = layer_idx  # which layer's K/V the backend stores and reads
        self.scale = self.hd**-0.5
        self.q_proj = column_linear(cfg.hidden_size, self.nh * self.hd, tp)
        self.k_proj = column_linear(cfg.hidden_size, self.nkv * self.hd, tp)
        self.v_proj = column_linear(cfg.hidden_size, self.nkv * self.hd, tp)
        self.o_proj = row_linear(self.nh * self.hd, cfg.hidden_size, tp)
        self.qk_norm = (
            cfg.qk_norm
        )  # QK-norm: Qwen3 normalises each head (Llama has no such norm)
        if self.qk_norm:
            self.q_norm = RMSNorm(self.hd, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(self.hd, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, attn=None):
        """x [..., d] -> [..., d]; attn is the attention backend (default: DenseAttention, no
        cache)."""
        attn = DenseAttention() if attn is None else attn
        tokens = x.shape[:-1]  # [B, T], or [N] for a flat batch
        q = self.q_proj(x).view(*tokens, self.nh, self.hd)  # [..., H, hd]
        k = self.k_proj(x).view(*tokens, self.nkv, self.hd)  # [..., KV, hd]
        v = self.v_proj(x).view(*tokens, self.nkv, self.hd)
        if self.qk_norm:  # Qwen3: norm before RoPE
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        o = attn.attend(
            self.layer_idx, q, k, v, self.scale
        )  # [..., H, hd]: the backend caches K/V as it likes
        return self.o_proj(o.reshape(*tokens, self.nh * self.hd))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig, tp: TensorParallelGroup | None = None):
        super().__init__()
        inter = cfg.intermediate_size // (
            1 if tp is None else check_tp_size(cfg, tp.size)
        )  # this rank's units
        self.gate_proj = column_linear(cfg.hidden_size, inter, tp)
        self.up_proj = column_linear(cfg.hidden_size, inter, tp)
        self.down_proj = row_linear(inter, cfg.hidden_size, tp)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(
        self, cfg: ModelConfig, layer_idx: int = 0, tp: TensorParallelGroup | None = None
    ):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer_idx, tp)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg, tp)

    def forward(self, x, cos, sin, attn=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attn)
        return x + self.mlp(self.post_attention_layernorm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: TensorParallelGroup | None = None):
        """tp: this process's rank in a tensor-parallel group (chapter 10); None builds the
        whole model."""
        super().__init__()
        self.cfg, self.tp = cfg, tp
        V, d = cfg.vocab_size, cfg.hidden_size
        self.embed_tokens = (
            nn.Embedding(V, d) if tp is None else VocabParallelEmbedding(V, d, tp)
        )
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, i, tp) for i in range(cfg.num_hidden_layers)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = (
            Linear(d, V) if tp is None else ParallelLMHead(V, d, tp)
        )  # rank 0 gathers the logits
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight  # one tensor, two roles
        self.local_kv_heads = self.layers[
            0
        ].self_attn.nkv  # KV heads this rank caches (all of them without tp)

    def pack_for_cpu(self) -> int:
        """Pack the projection weights for oneDNN (see `linear`); bytes the packed copies
        hold."""
        self.packed_bytes = pack_for_cpu(self)
        return self.packed_bytes

    def _apply(self, fn, recurse=True):  # .to(), .float(), .cuda(): pack what is now on the CPU
        out = super()._apply(fn, recurse)
        self.pack_for_cpu()
        return out

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        result = super().load_state_dict(state_dict, strict=strict, assign=assign)
        self.pack_for_cpu()  # new values: pack them now, not at the first product
        return result

    def check_token_ids(self, input_ids) -> None:
        """Raise ValueError unless every id has an embedding. With an attention backend the
        forward never
        reads values back (on a GPU each read stalls the step), so the code that built the
        batch on the host calls this; the plain call without a backend checks its own ids."""
        ids = input_ids
        if isinstance(ids, torch.Tensor):
            if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
                raise ValueError(
                    f"input_ids must hold integer token ids, got dtype {ids.dtype}"
                )
            ids = ids.flatten().tolist()
        V = self.cfg.vocab_size
        for t in ids:
            if as_int(t) is None or not 0 <= t < V:
                raise ValueError(
                    f"token id {t!r} is outside the vocabulary: expected an int with 0 <= id "
                    f"< {V}"
                )

    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor | None = None,
        attn=None,
        logits_indices=None,
    ) -> torch.Tensor:
        """input_ids [B, T] (or flat [N]) -> logits [B, T, V] ([B, M, V] with M logits_indices).

        positions: each token's position, [T] (shared by the rows), [B, T] or [N]; by default
        0..T-1, a fresh sequence. attn: the attention backend (default `DenseAttention()`: no
        cache). A backend that holds earlier tokens needs the new tokens' positions, so with
        `attn` they must be given. logits_indices: the token rows that get the output layer
        (e.g. [-1]: only the last one). With a backend, nothing in here reads a value back to
        the host.
        """
        if input_ids.dim() not in (1, 2):
            raise ValueError(
                "input_ids must be [batch, tokens] or flat [tokens], got shape "
                f"{tuple(input_ids.shape)}"
            )
        if positions is None:
            if attn is not None:
                raise ValueError(
                    "with an attention backend, pass the new tokens' positions: "
                    "a cache's tokens continue after what it holds (see "
                    "kv_cache.forward_cached)"
                )
            positions = torch.arange(input_ids.shape[-1], device=input_ids.device)
        if positions.shape not in (input_ids.shape, input_ids.shape[-1:]):
            raise ValueError(
                f"positions have shape {tuple(positions.shape)}: expected "
                f"{tuple(input_ids.shape)} "
                f"or {tuple(input_ids.shape[-1:])}, one per token"
            )
        # chapter 1's plain call: check the ids here (engine paths check them on the host)
        if attn is None:
            self.check_token_ids(input_ids)
            attn = DenseAttention()
        x = self.embed_tokens(input_ids)  # [..., d]
        # cos, sin: [P, hd], float32
        cos, sin = rope_cos_sin(positions.flatten(), self.cfg.hd, self.cfg.rope_theta)
        # [..., 1, hd]: broadcast over heads
        cos = cos.view(*positions.shape, 1, self.cfg.hd).to(x.dtype)
        sin = sin.view(*positions.shape, 1, self.cfg.hd).to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, attn)
        if logits_indices is not None:
            # the output layer is the largest matrix: run it only where needed
            x = x[..., logits_indices, :]
        return self.lm_head(self.norm(x))

    @classmethod
    def from_pretrained(
        cls,
        path,
        dtype: torch.dtype = torch.float32,
        device="cpu",
        tp: TensorParallelGroup | None = None,
    ) -> Transformer:
        """Load a Hugging Face Qwen3 or Llama checkpoint folder (config.json + safetensors,
        sharded or not).

        With `tp`, only this rank's slice of each tensor is read from the files (chapter 10)."""
        path = Path(path).expanduser()
        hf_config = read_config(path)
        cfg = ModelConfig.from_hf(hf_config, source=str(path / "config.json"))
        generation_config = read_generation_config(path, hf_config)  # EOS ids, default sampling
        if tp is not None:
            check_tp_size(cfg, tp.size)
        state = (
            load_safetensors(path) if tp is None else load_shard(path, cfg, tp.rank, tp.size)
        )
        with torch.device("meta"):
            model = cls(cfg, tp)
        expected = {
            k
            for k in model.state_dict()
            if not (cfg.tie_word_embeddings and k == "lm_head.weight")
        }
        if cfg.tie_word_embeddings:
            state.pop("lm_head.weight", None)  # some tied checkpoints store the head anyway
        missing, unexpected = sorted(expected - state.keys()), sorted(state.keys() - expected)
        if missing or unexpected:
            raise ValueError(
                f"checkpoint {path} does not match its config: "
                f"missing tensors {_few(missing)}, unexpected tensors {_few(unexpected)}"
            )
        own = model.state_dict()
        for name, t in state.items():
            if tuple(t.shape) != tuple(own[name].shape):
                raise ValueError(
                    f"tensor {name} has shape {tuple(t.shape)}, config expects "
                    f"{tuple(own[name].shape)}"
                )
        model.load_state_dict(
            {k: v.to(dtype) for k, v in state.items()}, strict=False, assign=True
        )
        if cfg.tie_word_embeddings:
            model.lm_head.weight = model.embed_tokens.weight
        model.generation_config = generation_config  # as transformers' models carry theirs
        return model.to(device).eval()
