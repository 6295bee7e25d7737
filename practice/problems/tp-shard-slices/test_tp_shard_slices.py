"""Tests for kv_heads_of_rank and shard_for_rank: the rules by hand, the GQA invariant (a rank
holds the KV heads its
query heads read) on random configs, every tensor of random checkpoints against
minillm.parallel.layers's loader rule, the vocabulary padding, and the sizes that must be
refused."""

import random
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from grading import check_close, check_equal, check_names, check_raises

from minillm.parallel.layers import shard_range, vocab_rows

NAMES = ["q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"]


def random_config(rng):
    tp = rng.choice([2, 3, 4, 8])
    kv = rng.choice([k for k in (1, 2, 3, 4, 6, 8, 12) if k % tp == 0 or tp % k == 0])
    heads = kv * rng.choice([g for g in (1, 2, 3, 4, 8) if kv * g % tp == 0])
    return tp, SimpleNamespace(
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=rng.choice([2, 4, 8]),
        hidden_size=rng.choice([4, 6, 8]),
        intermediate_size=tp * rng.randint(1, 4),
        vocab_size=rng.randint(tp, 40),
    )


def checkpoint(cfg, g):
    """Every kind of tensor of one layer, and the vocabulary tables, with the checkpoint's names
    and shapes."""
    d, hd, H, KV, inter = (
        cfg.hidden_size,
        cfg.head_dim,
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.intermediate_size,
    )
    shapes = {
        "model.embed_tokens.weight": (cfg.vocab_size, d),
        "lm_head.weight": (cfg.vocab_size, d),
        "model.layers.0.input_layernorm.weight": (d,),
        "model.layers.0.self_attn.q_proj.weight": (H * hd, d),
        "model.layers.0.self_attn.k_proj.weight": (KV * hd, d),
        "model.layers.0.self_attn.v_proj.weight": (KV * hd, d),
        "model.layers.0.self_attn.o_proj.weight": (d, H * hd),
        "model.layers.0.self_attn.k_norm.weight": (hd,),
        "model.layers.0.mlp.gate_proj.weight": (inter, d),
        "model.layers.0.mlp.up_proj.weight": (inter, d),
        "model.layers.0.mlp.down_proj.weight": (d, inter),
        "model.norm.weight": (d,),
    }
    return {name: torch.randn(*shape, generator=g) for name, shape in shapes.items()}


def expected(name, weight, rank, tp, cfg):
    """minillm's loader rule (minillm/parallel/layers.py), applied to the whole tensor."""
    where = shard_range(name.removeprefix("model."), cfg, rank, tp)
    if where is None:
        return weight
    dim, start, stop = where
    t = weight.narrow(dim, start, stop - start)
    if name.split(".")[-2] in ("embed_tokens", "lm_head"):
        t = F.pad(t, (0, 0, 0, vocab_rows(cfg.vocab_size, rank, tp)[1] - t.shape[0]))
    return t


def test_the_example(learner):
    """The task's example: shares of 8 KV heads, a k_proj slice and a padded embedding."""
    check_equal(learner.kv_heads_of_rank(8, 1, 4), [2, 3], "kv_heads_of_rank(8, 1, 4)")
    k = torch.arange(12.0).view(4, 3)
    check_close(
        learner.shard_for_rank("model.layers.0.self_attn.k_proj.weight", k, 1, 2, 4, 2, 2),
        k[2:4],
        "rank 1's k_proj at tp 2 (2 KV heads of head_dim 2)",
    )
    check_close(
        learner.shard_for_rank("model.embed_tokens.weight", torch.ones(5, 2), 1, 2, 4, 2, 2),
        torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]),
        "rank 1's embedding rows of a 5-token vocabulary",
    )


def test_kv_heads_split_then_replicate(learner):
    """Enough KV heads: equal consecutive shares. Fewer than ranks: one head each, on tp_size /
    KV ranks in a row."""
    table = {
        (4, 2): [[0, 1], [2, 3]],
        (6, 3): [[0, 1], [2, 3], [4, 5]],
        (2, 4): [[0], [0], [1], [1]],
        (1, 3): [[0], [0], [0]],
        (2, 8): [[0]] * 4 + [[1]] * 4,
        (4, 4): [[0], [1], [2], [3]],
    }
    for (kv, tp), want in table.items():
        got = [list(learner.kv_heads_of_rank(kv, r, tp)) for r in range(tp)]
        check_equal(got, want, f"kv_heads_of_rank({kv}, rank, {tp}) for every rank")


def test_every_rank_holds_the_kv_heads_its_queries_read(learner):
    """Rank r computes query heads r*H/tp ..; query head h reads KV head h*KV//H: the rank must
    hold exactly those."""
    rng = random.Random(7)
    for case in range(40):
        tp, cfg = random_config(rng)
        H, KV = cfg.num_attention_heads, cfg.num_key_value_heads
        for rank in range(tp):
            q = range(rank * H // tp, (rank + 1) * H // tp)
            check_equal(
                list(learner.kv_heads_of_rank(KV, rank, tp)),
                sorted({h * KV // H for h in q}),
                f"case {case}: the KV heads of rank {rank} at tp {tp} with {H} query and {KV} "
                "KV heads",
            )


def test_random_configs_match_minillm(learner):
    """Every tensor kind of random checkpoints (tp 2 to 8, KV heads above and below tp) on every
    rank."""
    rng = random.Random(8)
    for case in range(12):
        tp, cfg = random_config(rng)
        for name, weight in checkpoint(cfg, torch.Generator().manual_seed(case)).items():
            for rank in range(tp):
                got = learner.shard_for_rank(
                    name,
                    weight,
                    rank,
                    tp,
                    cfg.num_attention_heads,
                    cfg.num_key_value_heads,
                    cfg.head_dim,
                )
                check_close(
                    got,
                    expected(name, weight, rank, tp, cfg),
                    f"case {case}: rank {rank}'s {name} at tp {tp} ({cfg.num_attention_heads} "
                    "heads, "
                    f"{cfg.num_key_value_heads} KV heads, head_dim {cfg.head_dim})",
                    atol=0,
                )


def test_the_vocabulary_is_padded_to_equal_heights(learner):
    """ceil(V / tp) rows on every rank, the last one's padded with zeros; without padding the
    tables differ in height."""
    for vocab, tp in [(10, 4), (7, 2), (9, 3), (13, 8)]:
        table = torch.arange(1.0, vocab * 2 + 1).view(vocab, 2)
        per = -(-vocab // tp)
        shards = [
            learner.shard_for_rank("lm_head.weight", table, r, tp, tp, tp, 2) for r in range(tp)
        ]
        check_equal(
            [tuple(s.shape) for s in shards],
            [(per, 2)] * tp,
            f"the shapes of lm_head's shards, V {vocab}, tp {tp}",
        )
        check_close(
            torch.cat(shards)[:vocab],
            table,
            f"the shards of a {vocab}-row table at tp {tp}, stacked",
            atol=0,
        )
        check_equal(
            torch.cat(shards)[vocab:].abs().sum().item(), 0.0, "the padding rows (zeros)"
        )


def test_sizes_that_do_not_divide_are_refused(learner):
    """tp_size must divide the query heads, and it and the KV heads must divide one or the
    other:
    every attention tensor (q_proj, k_proj, v_proj, o_proj) of such a config is refused with a
    ValueError naming tp_size, not only the ones that hold KV heads."""
    e = check_raises(
        ValueError, learner.kv_heads_of_rank, 3, 0, 2, what="kv_heads_of_rank(3, 0, 2)"
    )
    check_names(e, 2, "tp_size 2 over 3 KV heads")
    rng = random.Random(11)
    bad_kv = [
        (4, 6),
        (6, 4),
        (8, 12),
        (3, 2),
        (5, 2),
        (6, 9),
    ]  # (tp, KV heads): neither divides
    bad_q = [
        (3, 1, 4),
        (4, 2, 6),
        (8, 4, 12),
        (5, 1, 6),
    ]  # (tp, KV, query heads): tp cannot divide
    configs = [(tp, kv, tp * kv * rng.choice([1, 2])) for tp, kv in bad_kv] + bad_q
    for tp, kv, heads in configs:
        hd, d = rng.choice([2, 4]), 4
        rank = rng.randrange(tp)
        shapes = {
            "q_proj": (heads * hd, d),
            "k_proj": (kv * hd, d),
            "v_proj": (kv * hd, d),
            "o_proj": (d, heads * hd),
        }
        for module, shape in shapes.items():
            what = (
                f"shard_for_rank of {module} at tp_size {tp} (rank {rank}), {heads} query and "
                f"{kv} KV heads"
            )
            name = f"model.layers.0.self_attn.{module}.weight"
            e = check_raises(
                ValueError,
                learner.shard_for_rank,
                name,
                torch.zeros(*shape),
                rank,
                tp,
                heads,
                kv,
                hd,
                what=what,
            )
            check_names(e, tp, what)
        if kv % tp and tp % kv:
            what = f"kv_heads_of_rank({kv}, {rank}, {tp})"
            e = check_raises(ValueError, learner.kv_heads_of_rank, kv, rank, tp, what=what)
            check_names(e, tp, what)
