"""Column- and row-parallel linear layers, and the tensor-parallel SwiGLU MLP, with every rank
played here."""

import torch
import torch.nn.functional as F  # noqa: F401 (F.silu, F.linear)


def column_shard(weight: torch.Tensor, rank: int, tp_size: int) -> torch.Tensor:
    """Rank `rank`'s block of rows (output features) of weight [out, in]."""
    raise NotImplementedError("column_shard")


def row_shard(weight: torch.Tensor, rank: int, tp_size: int) -> torch.Tensor:
    """Rank `rank`'s block of columns (input features) of weight [out, in]."""
    raise NotImplementedError("row_shard")


def column_parallel_linear(
    x: torch.Tensor, weight: torch.Tensor, tp_size: int
) -> list[torch.Tensor]:
    """Each rank's slice [..., out / tp_size] of x @ weight.T; no communication."""
    raise NotImplementedError("column_parallel_linear")


def row_parallel_linear(
    x_slices: list[torch.Tensor], weight: torch.Tensor, tp_size: int, all_reduce
) -> list[torch.Tensor]:
    """Each rank's full y [..., out] from its input slice x_slices[r], with one all_reduce of
    the partials."""
    raise NotImplementedError("row_parallel_linear")


def tensor_parallel_mlp(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    tp_size: int,
    all_reduce,
) -> list[torch.Tensor]:
    """down(silu(gate(x)) * up(x)) on each rank: gate, up column-parallel, down row-parallel,
    one all_reduce."""
    raise NotImplementedError("tensor_parallel_mlp")
