"""Wrong: column_parallel_linear computes the whole output and cuts it with chunk: it never
refuses
an output size that tp_size does not divide (chunk hands out slices of different sizes, or fewer
of them).

Caught by: test_a_size_that_does_not_divide_is_refused.
"""

import torch
import torch.nn.functional as F  # noqa: F401 (F.silu, F.linear)


def _block(weight: torch.Tensor, dim: int, rank: int, tp_size: int) -> torch.Tensor:
    n = weight.shape[dim]
    if n % tp_size:
        raise ValueError(f"tp_size {tp_size} does not divide dimension {dim} of size {n}")
    per = n // tp_size
    return weight.narrow(dim, rank * per, per)


def column_shard(weight: torch.Tensor, rank: int, tp_size: int) -> torch.Tensor:
    """Rank `rank`'s block of rows (output features) of weight [out, in]."""
    return _block(weight, 0, rank, tp_size)


def row_shard(weight: torch.Tensor, rank: int, tp_size: int) -> torch.Tensor:
    """Rank `rank`'s block of columns (input features) of weight [out, in]."""
    return _block(weight, 1, rank, tp_size)


def column_parallel_linear(
    x: torch.Tensor, weight: torch.Tensor, tp_size: int
) -> list[torch.Tensor]:
    """Each rank's slice [..., out / tp_size] of x @ weight.T; no communication."""
    return list(F.linear(x, weight).chunk(tp_size, -1))  # the whole output, cut in slices


def row_parallel_linear(
    x_slices: list[torch.Tensor], weight: torch.Tensor, tp_size: int, all_reduce
) -> list[torch.Tensor]:
    """Each rank's full y [..., out] from its input slice x_slices[r], with one all_reduce of
    the partials."""
    partials = [F.linear(x_slices[r], row_shard(weight, r, tp_size)) for r in range(tp_size)]
    return all_reduce(partials)


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
    gates = column_parallel_linear(x, gate_weight, tp_size)
    ups = column_parallel_linear(x, up_weight, tp_size)
    hidden = [F.silu(g) * u for g, u in zip(gates, ups)]  # rank r's slice of the hidden units
    return row_parallel_linear(hidden, down_weight, tp_size, all_reduce)
