"""Tensor parallelism: N ranks give the logits of one process (fp32, 1e-4) and the same greedy
tokens; the
all-reduces per forward follow the formula; each rank holds about 1/N of the weights; a worker
that dies or hangs makes the engine raise a clear error, and no process is left behind.

The layer math is checked on random configs with the ranks as threads of this process (a
stand-in for the collectives, so dozens of configs run in seconds); the engine runs real worker
processes over gloo.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import threading
import time

import pytest
import torch

from minillm.checks.mixed_batch import FP32_THRESHOLD
from minillm.checks.tensor_parallel import mixed_steps, pool_blocks, tp_mixed_batch_check
from minillm.engine import LLMEngine
from minillm.model import Transformer
from minillm.paged import PagedKVCache
from minillm.parallel.layers import (
    TensorParallelGroup,
    all_reduces_per_forward,
    kv_heads_of_rank,
    load_shard,
    shard_range,
    weight_bytes,
)
from minillm.parallel.workers import TensorParallelError
from minillm.runner import ModelRunner
from minillm.sampling import SamplingParams

GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module", autouse=True)
def no_process_left_behind():
    """Whatever a test did, every worker is gone at the end (and is stopped here if a test
    failed to)."""
    yield
    left = mp.active_children()
    for p in left:
        p.kill()
        p.join(5)
    assert not left, f"worker processes were left running: {left}"


def gone(pid: int) -> bool:
    """True when no process (not even an unreaped zombie) has this pid."""
    return not os.path.exists(f"/proc/{pid}")


# ---- the layer math, with the ranks as threads
#   --------------------------------------------------------


class ThreadHub:
    """The meeting point of N threads that play N ranks: sums and gathers in rank order, like a
    collective."""

    def __init__(self, size: int):
        self.size, self.slots, self.barrier = (
            size,
            [None] * size,
            threading.Barrier(size, timeout=30),
        )

    def meet(self, rank: int, x: torch.Tensor) -> list[torch.Tensor]:
        self.slots[rank] = x.clone()
        self.barrier.wait()
        parts = list(self.slots)
        self.barrier.wait()  # nobody overwrites a slot before everyone has read it
        return parts


class ThreadGroup(TensorParallelGroup):
    def __init__(self, rank: int, size: int, hub: ThreadHub):
        super().__init__(rank, size)
        self.hub = hub

    def sum_over_ranks(self, x):
        parts = self.hub.meet(self.rank, x)
        x.copy_(torch.stack(parts).sum(0))
        return x

    def gather_to_first(self, x):
        parts = self.hub.meet(self.rank, x)
        return parts if self.rank == 0 else None


def run_ranks(path, size: int, input_ids: torch.Tensor):
    """Load every rank's shard and run the same forward on all of them at once; (rank models,
    rank 0's logits)."""
    hub = ThreadHub(size)
    models = [
        Transformer.from_pretrained(path, tp=ThreadGroup(r, size, hub)) for r in range(size)
    ]
    out = [None] * size
    errors = []

    def run(r):
        try:
            out[r] = models[r](input_ids)
        except BaseException as e:  # noqa: BLE001 (re-raised below, in the test's thread)
            errors.append(e)
            hub.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    assert all(o is None for o in out[1:]), "only rank 0 gets the gathered logits"
    return models, out[0]


def random_configs(n: int, seed: int = 10):
    rng = random.Random(seed)
    for _ in range(n):
        size = rng.choice([2, 3, 4])
        kv = rng.choice([k for k in (1, 2, 3, 4, 6, 8) if k % size == 0 or size % k == 0])
        heads = kv * rng.choice([g for g in (1, 2, 3, 4) if (kv * g) % size == 0] or [size])
        config = dict(
            vocab_size=rng.randint(300, 700),
            hidden_size=rng.choice([16, 32, 48]),
            intermediate_size=size * rng.randint(4, 24),
            num_hidden_layers=rng.randint(1, 3),
            num_attention_heads=heads,
            num_key_value_heads=kv,
            head_dim=rng.choice([8, 16]),
            tie_word_embeddings=rng.random() < 0.5,
        )
        yield size, config, rng.randrange(1000)


CONFIGS = list(random_configs(12))


def test_the_random_configs_cover_kv_heads_below_the_tp_size():
    assert any(c["num_key_value_heads"] < size for size, c, _ in CONFIGS)
    assert any(c["num_key_value_heads"] >= size for size, c, _ in CONFIGS)
    assert any(c["vocab_size"] % size for size, c, _ in CONFIGS), (
        "a vocabulary that needs padding"
    )


@pytest.mark.parametrize(
    "size,config,seed",
    CONFIGS,
    ids=[
        f"tp{s}-h{c['num_attention_heads']}-kv{c['num_key_value_heads']}-v{c['vocab_size']}"
        for s, c, _ in CONFIGS
    ],
)
def test_tp_logits_equal_one_process_on_random_configs(tiny_checkpoint, size, config, seed):
    path = tiny_checkpoint(seed=seed, **config)
    ids = torch.randint(
        0, config["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(seed)
    )
    want = Transformer.from_pretrained(path)(ids)
    models, got = run_ranks(path, size, ids)
    err = (got - want).abs().max().item()
    assert err < FP32_THRESHOLD, f"TP={size} logits differ from one process by {err:.2e}"
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    calls = models[0].tp.stats
    assert (
        calls.all_reduce == all_reduces_per_forward(config["num_hidden_layers"])
        and calls.gather == 1
    )
    assert calls.all_reduce_bytes == calls.all_reduce * ids.numel() * config["hidden_size"] * 4


def test_kv_heads_are_split_then_replicated():
    assert [list(kv_heads_of_rank(4, r, 2)) for r in range(2)] == [[0, 1], [2, 3]]
    assert [list(kv_heads_of_rank(2, r, 4)) for r in range(4)] == [[0], [0], [1], [1]]
    assert [list(kv_heads_of_rank(1, r, 3)) for r in range(3)] == [[0], [0], [0]]


def test_a_size_that_does_not_divide_the_heads_is_refused(tiny_checkpoint):
    path = tiny_checkpoint(seed=1)
    with pytest.raises(
        ValueError, match="tensor_parallel_size 3 does not divide the 4 attention heads"
    ):
        Transformer.from_pretrained(path, tp=TensorParallelGroup(0, 3))
    with pytest.raises(ValueError, match="tensor_parallel_size 4 and the 3 KV heads"):
        Transformer.from_pretrained(
            tiny_checkpoint(
                seed=1, num_attention_heads=12, num_key_value_heads=3, intermediate_size=64
            ),
            tp=TensorParallelGroup(0, 4),
        )


@pytest.mark.parametrize("size", [2, 4])
def test_each_rank_loads_only_its_slice(tiny_default_path, size):
    """The default model: every shard is its own small tensor (not a view of the whole), ~1/N of
    the bytes."""
    full = Transformer.from_pretrained(tiny_default_path)
    cfg = full.cfg
    total = weight_bytes(full)
    for rank in range(size):
        state = load_shard(tiny_default_path, cfg, rank, size)
        for name, t in state.items():
            assert t.untyped_storage().nbytes() == t.numel() * t.element_size(), (
                f"{name} keeps the whole tensor"
            )
            where = shard_range(name, cfg, rank, size)
            if where is not None and name.split(".")[-2] not in ("embed_tokens", "lm_head"):
                dim, start, stop = where
                assert torch.equal(
                    t, full.state_dict()[name].narrow(dim, start, stop - start)
                ), name
        mine = sum(t.numel() * t.element_size() for t in state.values())
        assert abs(mine * size / total - 1) < 0.01, (
            f"rank {rank} holds {mine:,} of {total:,} bytes at TP={size}"
        )


# ---- real worker processes over gloo
#   --------------------------------------------------------------------


@pytest.fixture(scope="class")
def engine_tp2(tiny_default_path):
    """One engine of 2 ranks on the default model, closed after its class: a process joins one
    group at a time."""
    engine = LLMEngine(tiny_default_path, num_blocks=64, tensor_parallel_size=2)
    try:
        yield engine
    finally:
        engine.close()


class TestTwoRanks:
    def test_tp2_mixed_batch_logits_equal_tp1(self, engine_tp2, tiny_default_path):
        from minillm.checks.mixed_batch import check_prompts

        single = Transformer.from_pretrained(tiny_default_path)
        prompts = check_prompts(tiny_default_path, single.cfg.vocab_size)
        want = mixed_steps(
            ModelRunner(single, PagedKVCache.for_model(single, pool_blocks(prompts), 16)),
            prompts,
            single.cfg.vocab_size,
        )
        stats = engine_tp2.model.tp.stats
        stats.reset()
        got = mixed_steps(
            engine_tp2.runner, prompts, single.cfg.vocab_size
        )  # the engine is idle: its pool is free
        for (request, phase, a), (_, _, b) in zip(want, got):
            err = (a - b).abs().max().item()
            assert err < FP32_THRESHOLD, (
                f"{request} {phase}: TP=2 differs from TP=1 by {err:.2e}"
            )
        assert stats.all_reduce == 2 * all_reduces_per_forward(
            single.cfg.num_hidden_layers
        )  # two forwards
        assert stats.gather == 2

    def test_tp2_greedy_tokens_equal_tp1(self, engine_tp2, tiny_default_path):
        prompts = ["The capital of France is", "def fibonacci(n):", [5, 6, 7, 8, 9] * 7]
        want = [
            o.token_ids
            for o in LLMEngine(tiny_default_path, num_blocks=64).generate(prompts, GREEDY)
        ]
        stats = engine_tp2.model.tp.stats
        stats.reset()
        steps = 0
        ids = [engine_tp2.add_request(p, GREEDY) for p in prompts]
        outputs = {}
        while engine_tp2.has_unfinished():
            steps += 1
            outputs.update(
                {ev.request_id: ev.output for ev in engine_tp2.step() if ev.output is not None}
            )
        assert [outputs[i].token_ids for i in ids] == want
        assert stats.all_reduce == steps * all_reduces_per_forward(
            engine_tp2.model.cfg.num_hidden_layers
        )

    def test_each_rank_holds_half_the_weights_and_kv(self, engine_tp2, tiny_default_path):
        full = weight_bytes(Transformer.from_pretrained(tiny_default_path))
        workers = engine_tp2._tp_workers
        assert len(workers.weight_bytes) == 2 and all(
            abs(b * 2 / full - 1) < 0.01 for b in workers.weight_bytes
        )
        one = (
            PagedKVCache.bytes_per_block(Transformer.from_pretrained(tiny_default_path), 16)
            * 64
        )
        assert engine_tp2.runner.kv_bytes == [one // 2, one // 2]


def test_a_random_config_with_kv_heads_below_tp_in_processes(tiny_checkpoint):
    """TP=4 over 2 KV heads (each replicated on 2 ranks) and a vocabulary of 510 (padded to 4 x
    128)."""
    path = tiny_checkpoint(
        seed=3,
        vocab_size=510,
        num_key_value_heads=2,
        num_attention_heads=4,
        intermediate_size=96,
    )
    result = tp_mixed_batch_check(path, 4)
    assert all(r["err"] < FP32_THRESHOLD and r["same_argmax"] for r in result["rows"]), result[
        "rows"
    ]
    assert result["all_reduces"] == result["expected_all_reduces"]


def test_tp_needs_a_checkpoint_folder_and_a_valid_size(tiny_checkpoint, tiny_model):
    with pytest.raises(ValueError, match="tensor_parallel_size is 0: expected an int >= 1"):
        LLMEngine(tiny_checkpoint(seed=1), tensor_parallel_size=0)
    with pytest.raises(ValueError, match="needs a checkpoint folder"):
        LLMEngine(tiny_model(seed=1), tensor_parallel_size=2)
    with pytest.raises(ValueError, match="does not divide the 4 attention heads"):
        LLMEngine(tiny_checkpoint(seed=1), tensor_parallel_size=3)
    assert not mp.active_children(), "a refused engine starts no process"


def test_an_engine_that_fails_after_starting_its_workers_leaves_none(tiny_checkpoint):
    """max_model_len is checked after the model loads, so the workers are already up: they must
    go with the engine."""
    with pytest.raises(ValueError, match="max_model_len"):
        LLMEngine(
            tiny_checkpoint(seed=2), num_blocks=8, tensor_parallel_size=2, max_model_len=10**9
        )
    deadline = time.monotonic() + 10
    while mp.active_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not mp.active_children()


def started_engine(path, monkeypatch, timeout_s: float):
    monkeypatch.setenv("MINILLM_TP_TIMEOUT_S", str(timeout_s))
    engine = LLMEngine(path, num_blocks=32, tensor_parallel_size=2)
    stream = engine.stream(
        [[1, 2, 3, 4, 5], [9, 8, 7]], SamplingParams(max_tokens=50, ignore_eos=True)
    )
    for _ in range(4):  # mid-generation: a few tokens out
        next(stream)
    return engine, stream


def test_a_killed_worker_raises_a_clear_error_and_leaves_no_process(
    tiny_checkpoint, monkeypatch
):
    engine, stream = started_engine(tiny_checkpoint(seed=2), monkeypatch, timeout_s=20)
    try:
        pid = engine._tp_workers.pids[0]
        os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(
            TensorParallelError, match=r"rank 1 \(pid \d+\) exited with code -9"
        ):
            for _ in stream:
                pass
        assert time.monotonic() - start < 20, "the error came after the collective timeout"
        assert gone(pid) and not mp.active_children()
        with pytest.raises(TensorParallelError, match="were stopped"):
            engine.generate([[1, 2]], GREEDY)
    finally:
        engine.close()


def test_a_hung_worker_raises_within_the_collective_timeout(tiny_checkpoint, monkeypatch):
    engine, stream = started_engine(tiny_checkpoint(seed=2), monkeypatch, timeout_s=3)
    try:
        pid = engine._tp_workers.pids[0]
        os.kill(pid, signal.SIGSTOP)  # alive, but it never answers
        start = time.monotonic()
        with pytest.raises(
            TensorParallelError, match=r"rank 1 \(pid \d+\) is alive but did not answer .* 3 s"
        ) as error:
            for _ in stream:
                pass
        stop_s = error.value.stop_s  # reaping, then killing the stopped worker at once
        detected = time.monotonic() - start - stop_s
        assert 2.5 < detected < 10, f"the collective raised after {detected:.1f} s, timeout 3 s"
        assert 0 < stop_s < 1.5, f"stopping the group took {stop_s:.1f} s"
        assert gone(pid) and not mp.active_children()
    finally:
        engine.close()


def test_close_stops_the_workers(tiny_checkpoint):
    with LLMEngine(tiny_checkpoint(seed=2), num_blocks=8, tensor_parallel_size=2) as engine:
        pids = engine._tp_workers.pids
        assert engine.generate([[3, 4, 5]], GREEDY)[0].token_ids
    assert all(gone(p) for p in pids) and not mp.active_children()


def test_check_tp_refuses_a_bad_size(capsys):
    from minillm.cli import main

    with pytest.raises(SystemExit):
        main(["check", "--tp", "0"])
    assert "--tp: got '0', expected an int >= 1" in capsys.readouterr().err


def test_the_tp_threshold_is_1e4_or_32_roundings_of_the_logits():
    from minillm.checks.tensor_parallel import tp_threshold

    assert (
        tp_threshold(torch.float32, 35.0) == FP32_THRESHOLD
    )  # the tiny model: the book's 1e-4
    assert tp_threshold(torch.float32, 1000.0) == pytest.approx(32 * 2**-24 * 1000)
    assert tp_threshold(torch.bfloat16, 10.0) == pytest.approx(32 * 2**-8 * 10)


def test_gloo_all_reduce_sums_and_leaves_the_callers_tensors_alone():
    from minillm.parallel.collectives import GlooAllReduce

    with GlooAllReduce(2) as all_reduce:
        a, b = torch.arange(4, dtype=torch.float32), torch.full((4,), 10.0)
        kept = (a.clone(), b.clone())
        out = all_reduce([a, b])
        assert all(torch.equal(o, kept[0] + kept[1]) for o in out)
        assert torch.equal(a, kept[0]) and torch.equal(
            b, kept[1]
        )  # the inputs are the callers' own
        assert all_reduce.calls == 1 and all_reduce.bytes == 16
