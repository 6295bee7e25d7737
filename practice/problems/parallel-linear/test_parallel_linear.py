"""Tests for column- and row-parallel linear layers and the tensor-parallel MLP: the shards by
hand and at random
shapes, each rank's output against the unsplit layer for tp sizes 2 to 4, and the all-reduces
counted. The all-reduce your code calls is a real one: the grader runs it on tp_size gloo
processes of its own."""

import random

import pytest
import torch
import torch.nn.functional as F
from grading import check_close, check_equal, check_names, check_raises, fail, share

from minillm.parallel.collectives import GlooAllReduce


class CountingAllReduce:
    """The grader's all-reduce, shared with your code: each call goes to the gloo ranks and is
    recorded."""

    def __init__(self, ranks: GlooAllReduce):
        self.ranks, self.calls = ranks, []

    def __call__(self, tensors):
        tensors = list(tensors)
        self.calls.append([tuple(t.shape) for t in tensors])
        return self.ranks(tensors)


@pytest.fixture(scope="module")
def gloo():
    """One group of gloo processes per tp size, started when first needed and stopped after the
    module."""
    groups = {}

    def get(size):
        if size not in groups:
            groups[size] = GlooAllReduce(size)
        return share(CountingAllReduce(groups[size]), call=True)

    yield get
    for g in groups.values():
        g.close()


def swiglu(x, gate, up, down):
    return F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down)


def test_shards_by_hand(learner):
    """column_shard takes rows (output features), row_shard takes columns (input features)."""
    W = torch.arange(12.0).view(4, 3)
    check_equal(
        learner.column_shard(W, 1, 2).tolist(),
        [[6.0, 7.0, 8.0], [9.0, 10.0, 11.0]],
        "column_shard(W, 1, 2)",
    )
    check_equal(
        learner.row_shard(torch.arange(12.0).view(2, 6), 2, 3).tolist(),
        [[4.0, 5.0], [10.0, 11.0]],
        "row_shard(arange(12).view(2, 6), 2, 3)",
    )


def test_shards_tile_the_weight_at_random_shapes(learner):
    """For any shape and tp size, the ranks' shards side by side are the weight, in rank
    order."""
    rng = random.Random(1)
    for case in range(12):
        tp = rng.choice([1, 2, 3, 4])
        out, inp = tp * rng.randint(1, 5), tp * rng.randint(1, 5)
        W = torch.randn(out, inp, generator=torch.Generator().manual_seed(case))
        cols = [learner.column_shard(W, r, tp) for r in range(tp)]
        rows = [learner.row_shard(W, r, tp) for r in range(tp)]
        check_close(
            torch.cat(cols, 0),
            W,
            f"case {case}: column shards of a [{out}, {inp}] weight at tp {tp}, stacked",
        )
        check_close(
            torch.cat(rows, 1),
            W,
            f"case {case}: row shards of a [{out}, {inp}] weight at tp {tp}, side by side",
        )


class LocalSum:
    """An all-reduce in the grader's process, for calls that must be refused before any
    reduce."""

    def __call__(self, tensors):
        total = sum(tensors)
        return [total.clone() for _ in tensors]


def test_a_size_that_does_not_divide_is_refused(learner):
    """A dimension that tp_size does not divide cannot be split evenly: the shards, both layers
    and
    the MLP raise ValueError naming the size (10 or more: a number not in the message by
    accident).
    """
    W = torch.zeros(6, 5)
    e = check_raises(
        ValueError, learner.row_shard, W, 0, 2, what="row_shard of a [6, 5] weight at tp_size 2"
    )
    check_names(e, 5, "row_shard([6, 5], tp_size=2)")
    rng = random.Random(8)
    all_reduce = share(LocalSum(), call=True)
    for case in range(6):
        tp = rng.choice([3, 4, 5])
        even = tp * rng.randint(3, 5)
        odd = even + rng.randint(1, tp - 1)  # tp_size does not divide it
        g = torch.Generator().manual_seed(case)
        x_even, x_odd = torch.randn(2, even, generator=g), torch.randn(2, odd, generator=g)
        w_odd_rows = torch.randn(
            odd, even, generator=g
        )  # an output size tp_size does not divide
        w_odd_cols = torch.randn(
            even, odd, generator=g
        )  # an input size tp_size does not divide
        calls = [
            (learner.column_shard, (w_odd_rows, 0, tp), f"column_shard([{odd}, {even}])"),
            (learner.row_shard, (w_odd_cols, tp - 1, tp), f"row_shard([{even}, {odd}])"),
            (
                learner.column_parallel_linear,
                (x_even, w_odd_rows, tp),
                f"column_parallel_linear(x [2, {even}], weight [{odd}, {even}])",
            ),
            (
                learner.row_parallel_linear,
                (list(x_odd.tensor_split(tp, -1)), w_odd_cols, tp, all_reduce),
                f"row_parallel_linear(weight [{even}, {odd}])",
            ),
            (
                learner.tensor_parallel_mlp,
                (x_even, w_odd_rows, w_odd_rows.flip(0), w_odd_cols, tp, all_reduce),
                f"tensor_parallel_mlp(gate and up [{odd}, {even}], down [{even}, {odd}])",
            ),
        ]
        for fn, args, what in calls:
            e = check_raises(ValueError, fn, *args, what=f"case {case}: {what} at tp_size {tp}")
            check_names(e, odd, f"case {case}: {what} at tp_size {tp}")


def test_column_parallel_slices_are_the_unsplit_output(learner):
    """Column-parallel: each rank's slice of y, no communication; side by side they equal x @
    W.T."""
    rng = random.Random(2)
    for case in range(8):
        tp = rng.choice([2, 3, 4])
        g = torch.Generator().manual_seed(100 + case)
        x = torch.randn(*[rng.randint(1, 4) for _ in range(rng.randint(1, 2))], 8, generator=g)
        W = torch.randn(tp * rng.randint(1, 4), 8, generator=g)
        ys = learner.column_parallel_linear(x, W, tp)
        check_equal(
            len(ys),
            tp,
            f"case {case}: how many slices column_parallel_linear returns at tp {tp}",
        )
        check_close(
            torch.cat(list(ys), -1),
            F.linear(x, W),
            f"case {case}: the slices side by side",
            atol=1e-5,
        )


def test_row_parallel_sums_the_partials_with_one_all_reduce(learner, gloo):
    """Row-parallel: each rank multiplies its input slice; one all-reduce gives every rank the
    whole y."""
    rng = random.Random(3)
    for case in range(6):
        tp = [2, 3, 4][case % 3]
        all_reduce = gloo(tp)
        g = torch.Generator().manual_seed(200 + case)
        tokens, inp, out = rng.randint(1, 6), tp * rng.randint(1, 4), rng.randint(1, 9)
        x, W = torch.randn(tokens, inp, generator=g), torch.randn(out, inp, generator=g)
        ys = learner.row_parallel_linear(list(x.chunk(tp, -1)), W, tp, all_reduce)
        check_equal(
            len(all_reduce.calls),
            1,
            f"case {case}: all_reduce calls for one row-parallel layer at tp {tp}",
        )
        check_equal(
            all_reduce.calls[0],
            [(tokens, out)] * tp,
            f"case {case}: the shapes sent to all_reduce",
        )
        for r, y in enumerate(ys):
            check_close(y, F.linear(x, W), f"case {case}: rank {r}'s y at tp {tp}", atol=1e-4)


def test_the_mlp_equals_the_unsplit_one_on_every_rank(learner, gloo):
    """Gate and up by columns, down by rows: every rank's output is the unsplit SwiGLU's, for tp
    2 to 4."""
    rng = random.Random(4)
    for case in range(6):
        tp = [2, 3, 4][case % 3]
        all_reduce = gloo(tp)
        g = torch.Generator().manual_seed(300 + case)
        d, inter = rng.choice([4, 8, 16]), tp * rng.randint(1, 6)
        x = torch.randn(rng.randint(1, 3), rng.randint(1, 5), d, generator=g)
        gate, up, down = (
            torch.randn(inter, d, generator=g),
            torch.randn(inter, d, generator=g),
            torch.randn(d, inter, generator=g),
        )
        outs = learner.tensor_parallel_mlp(x, gate, up, down, tp, all_reduce)
        check_equal(
            len(outs),
            tp,
            f"case {case}: how many outputs tensor_parallel_mlp returns at tp {tp}",
        )
        for r, y in enumerate(outs):
            check_close(
                y,
                swiglu(x, gate, up, down),
                f"case {case}: rank {r}'s MLP output at tp {tp}",
                atol=1e-4,
            )


def test_the_mlp_needs_one_all_reduce(learner, gloo):
    """gate and up give each rank whole hidden units, exactly down's input slice: a single
    all-reduce per MLP."""
    all_reduce = gloo(2)
    g = torch.Generator().manual_seed(5)
    x, gate, up, down = (
        torch.randn(3, 8, generator=g),
        torch.randn(6, 8, generator=g),
        torch.randn(6, 8, generator=g),
        torch.randn(8, 6, generator=g),
    )
    learner.tensor_parallel_mlp(x, gate, up, down, 2, all_reduce)
    if len(all_reduce.calls) != 1:
        fail(
            f"tensor_parallel_mlp called all_reduce {len(all_reduce.calls)} times with shapes "
            f"{all_reduce.calls}: "
            "expected once, on down's partial outputs [3, 8]"
        )
    check_equal(all_reduce.calls[0], [(3, 8), (3, 8)], "the shapes of the one all_reduce")
