"""parallel/layers.py — tensor parallelism (Megatron-style): every layer split across N ranks,
two all-reduces a layer.

A linear layer y = x @ W.T with W [out, in] splits two ways:

- by columns of the output (ColumnParallelLinear): rank r holds rows r of W's `out` dimension
  and computes its slice of y; no communication. q, k, v, gate and up are split this way, so
  each rank owns whole attention heads and a slice of the MLP's hidden units.
- by rows of the input (RowParallelLinear): rank r holds a slice of W's `in` dimension,
  multiplies its slice of x and gets a partial sum of the whole y; an all-reduce adds the N
  partial sums. o and down are split this way, right after a column-parallel layer whose output
  slice is exactly their input.

So attention and the MLP each cost one all-reduce of [N tokens, hidden]. The embedding and the
output layer split the vocabulary: each rank embeds the ids in its range (zeros elsewhere) and
an all-reduce adds the rows; each rank computes its range's logits, and rank 0 gathers them
where they are sampled.

Each rank loads only its shard, sliced out of the same safetensors files (`load_shard`), so a
rank's weights and its part of the paged KV cache are about 1/N of the model's.
`TensorParallelGroup` is the rank's view of the group: it does (and counts) the collectives;
with size 1 they are no-ops.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from minillm.checking import check_int
from minillm.linear import linear
from minillm.parallel.processes import run_queue_s

COLUMN = (
    "q_proj",
    "k_proj",
    "v_proj",
    "gate_proj",
    "up_proj",
)  # split W [out, in] along out (dim 0)
ROW = ("o_proj", "down_proj")  # split along in (dim 1), followed by an all-reduce
VOCAB = ("embed_tokens", "lm_head")  # split along the vocabulary (dim 0)


@dataclass
class CommStats:
    """What one rank sent through the group: calls and payload bytes, by collective, the
    seconds it spent inside them (waiting for the other ranks included), and when it entered
    and left each one (perf_counter, a clock the machine's processes share)."""

    all_reduce: int = 0
    all_reduce_bytes: int = 0
    gather: int = 0
    gather_bytes: int = 0
    seconds: float = 0.0
    calls: list[tuple[float, float]] = field(default_factory=list)  # (entered, left), in order
    queued: list[float] = field(default_factory=list)  # run-queue seconds inside each call
    record_calls: bool = False  # keep `calls` (a timing run): off, a long-lived engine's list
    # would grow by 2L + 2 entries every step

    def reset(self) -> None:
        self.all_reduce = self.all_reduce_bytes = self.gather = self.gather_bytes = 0
        self.seconds = 0.0
        self.calls = []
        self.queued = []

    def queued_now(self) -> float:
        """This thread's run-queue seconds so far, read only in a timing run (a /proc read)."""
        return run_queue_s() if self.record_calls else 0.0

    def clock(self, start: float, queued: float | None = None) -> None:
        """Count a collective entered at `start`, with `queued_now()` read just before it, that
        has just returned."""
        end = time.perf_counter()
        self.seconds += end - start
        if self.record_calls:
            self.calls.append((start, end))
            # ready to run inside the call, but no core was free
            self.queued.append(0.0 if queued is None else run_queue_s() - queued)


@dataclass
class TensorParallelGroup:
    """Rank `rank` of `size`. The collectives run on torch.distributed's default group, which
    the
    process side (parallel/workers.py) initialises; a group of size 1 never communicates."""

    rank: int = 0
    size: int = 1
    stats: CommStats = field(default_factory=CommStats)

    def __post_init__(self):
        self.size = check_int("tensor_parallel_size", self.size, min=1)
        self.rank = check_int("rank", self.rank, min=0, max=self.size - 1)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum x over the ranks, in place; every rank gets the sum."""
        if self.size == 1:
            return x
        self.stats.all_reduce += 1
        self.stats.all_reduce_bytes += x.numel() * x.element_size()
        queued = self.stats.queued_now()
        start = time.perf_counter()
        x = self.sum_over_ranks(x)
        self.stats.clock(start, queued)
        return x

    def sum_over_ranks(self, x: torch.Tensor) -> torch.Tensor:
        """The collective itself (a test may stand in another transport, e.g. threads in one
        process)."""
        import torch.distributed as dist

        dist.all_reduce(x)
        return x

    def gather_last_dim(self, x: torch.Tensor, total: int) -> torch.Tensor | None:
        """Rank 0 gets the ranks' x [..., n] side by side, cut to [..., total]; the other ranks
        get None."""
        if self.size == 1:
            return x
        self.stats.gather += 1
        self.stats.gather_bytes += x.numel() * x.element_size()
        queued = self.stats.queued_now()
        start = time.perf_counter()
        parts = self.gather_to_first(x.contiguous())
        self.stats.clock(start, queued)
        return torch.cat(parts, dim=-1)[..., :total] if self.rank == 0 else None

    def gather_to_first(self, x: torch.Tensor) -> list[torch.Tensor] | None:
        """Every rank's x, in rank order, on rank 0 (None elsewhere)."""
        import torch.distributed as dist

        parts = [torch.empty_like(x) for _ in range(self.size)] if self.rank == 0 else None
        dist.gather(x, parts, dst=0)
        return parts


# ---- which slice of each checkpoint tensor a rank holds
#   ----------------------------------------------


def check_tp_size(cfg, size: int) -> int:
    """size, or ValueError saying which of the model's dimensions it does not divide."""
    size = check_int("tensor_parallel_size", size, min=1)
    H, KV, inter = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size
    if H % size:
        raise ValueError(
            f"tensor_parallel_size {size} does not divide the {H} attention heads: "
            f"expected a divisor of {H}"
        )
    if KV % size and size % KV:
        raise ValueError(
            f"tensor_parallel_size {size} and the {KV} KV heads: expected one to divide the "
            "other "
            "(KV heads are split when there are enough, replicated otherwise)"
        )
    if inter % size:
        raise ValueError(
            f"tensor_parallel_size {size} does not divide intermediate_size {inter}"
        )
    return size


def kv_heads_of_rank(num_kv_heads: int, rank: int, size: int) -> range:
    """The KV heads rank `rank` holds: its share when size <= KV; else one head, replicated on
    size // KV ranks.

    With H query heads, rank r computes heads r*H/size ..; they read KV head h * KV // H, which
    is this head.
    """
    if size <= num_kv_heads:
        per = num_kv_heads // size
        return range(rank * per, (rank + 1) * per)
    head = rank // (size // num_kv_heads)  # ranks 0..size/KV-1 share head 0, and so on
    return range(head, head + 1)


def vocab_rows(vocab_size: int, rank: int, size: int) -> tuple[int, int]:
    """(start, rows) of the vocabulary on this rank: ceil(V / size) rows each; the last rank's
    are padded."""
    per = (vocab_size + size - 1) // size  # ceil(V / size)
    return rank * per, per


def shard_range(name: str, cfg, rank: int, size: int) -> tuple[int, int, int] | None:
    """(dim, start, stop) of checkpoint tensor `name` (e.g. "layers.0.self_attn.k_proj.weight")
    on this rank;
    None when every rank holds the whole tensor (the norms)."""
    module = name.split(".")[-2]
    hd = cfg.head_dim
    q_per = cfg.num_attention_heads // size * hd  # query features per rank
    if module in ("q_proj", "o_proj"):
        return (0 if module == "q_proj" else 1), rank * q_per, (rank + 1) * q_per
    if module in ("k_proj", "v_proj"):
        heads = kv_heads_of_rank(cfg.num_key_value_heads, rank, size)
        return 0, heads.start * hd, heads.stop * hd
    if module in ("gate_proj", "up_proj", "down_proj"):
        per = cfg.intermediate_size // size
        return (1 if module == "down_proj" else 0), rank * per, (rank + 1) * per
    if module in VOCAB:
        start, per = vocab_rows(cfg.vocab_size, rank, size)
        return (
            0,
            min(start, cfg.vocab_size),
            min(start + per, cfg.vocab_size),
        )  # a last rank may hold only padding
    return None


def load_shard(path, cfg, rank: int, size: int) -> dict[str, torch.Tensor]:
    """This rank's slice of every tensor of the checkpoint at `path`, read with safetensors'
    get_slice.

    A slice of rows (dim 0) reads just its bytes; a slice of columns (dim 1) is read one
    tensor at a time and copied out, so a rank keeps only its slice. Names lose their
    `model.` prefix."""
    from safetensors import safe_open

    from minillm.weights import check_safetensors_file, weight_files

    state = {}
    for file in weight_files(Path(path)):
        check_safetensors_file(file)
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                name = key.removeprefix("model.")
                part = f.get_slice(key)
                where = shard_range(name, cfg, rank, size)
                if where is None:
                    state[name] = part[:]
                    continue
                dim, start, stop = where
                t = part[start:stop] if dim == 0 else part[:, start:stop]
                if t.untyped_storage().nbytes() != t.numel() * t.element_size():
                    t = t.clone(
                        memory_format=torch.contiguous_format
                    )  # keep the slice, free what was read around it
                if (
                    name.split(".")[-2] in VOCAB
                ):  # pad the last rank's vocabulary rows to the common height
                    rows = vocab_rows(cfg.vocab_size, rank, size)[1]
                    t = F.pad(t, (0, 0, 0, rows - t.shape[0]))
                state[name] = t
    return state


# ---- the layers: each holds its shard; the math is the unsplit layer's on that shard
#   -------------------


class ColumnParallelLinear(nn.Module):
    """W [out, in] split along out: weight [out / size, in]; y's slice of this rank, no
    communication."""

    def __init__(self, in_features: int, out_features: int, tp: TensorParallelGroup):
        super().__init__()
        self.tp = tp
        self.weight = nn.Parameter(
            torch.empty(out_features, in_features)
        )  # out_features: this rank's share

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight)  # [..., out / size]


class RowParallelLinear(nn.Module):
    """W [out, in] split along in: weight [out, in / size]; the partial products are summed by
    an all-reduce."""

    def __init__(self, in_features: int, out_features: int, tp: TensorParallelGroup):
        super().__init__()
        self.tp = tp
        self.weight = nn.Parameter(
            torch.empty(out_features, in_features)
        )  # in_features: this rank's share

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tp.all_reduce(
            linear(x, self.weight)
        )  # [..., out]: the sum over the ranks' slices of in


class VocabParallelEmbedding(nn.Module):
    """The embedding table split by vocabulary rows; ids outside this rank's range embed as
    zeros."""

    def __init__(self, vocab_size: int, hidden_size: int, tp: TensorParallelGroup):
        super().__init__()
        self.tp = tp
        self.start, rows = vocab_rows(vocab_size, tp.rank, tp.size)
        self.weight = nn.Parameter(torch.empty(rows, hidden_size))  # [V / size, d]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.start
        mine = (local >= 0) & (local < self.weight.shape[0])
        x = F.embedding(local.clamp(0, self.weight.shape[0] - 1), self.weight)  # [..., d]
        return self.tp.all_reduce(
            x * mine[..., None].to(x.dtype)
        )  # exactly one rank holds each id's row


class ParallelLMHead(nn.Module):
    """The output layer split by vocabulary rows; rank 0 gathers the full logits, the others
    return None."""

    def __init__(self, vocab_size: int, hidden_size: int, tp: TensorParallelGroup):
        super().__init__()
        self.tp, self.vocab_size = tp, vocab_size
        self.weight = nn.Parameter(
            torch.empty(vocab_rows(vocab_size, tp.rank, tp.size)[1], hidden_size)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor | None:
        return self.tp.gather_last_dim(
            linear(x, self.weight), self.vocab_size
        )  # [..., V] on rank 0


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the distinct parameter tensors a rank holds (a tied head counts once)."""
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    return sum(seen.values())


def all_reduces_per_forward(num_hidden_layers: int) -> int:
    """The formula: one after attention's o_proj and one after the MLP's down_proj per layer,
    one for the embedding."""
    return 2 * num_hidden_layers + 1
