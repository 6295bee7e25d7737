"""parallel/prefill.py: prefill steps timed at a tensor_parallel_size, for chapter 10."""

import pytest

from minillm.parallel.prefill import prefill_step_times


def test_prefill_step_times_returns_every_repeat_of_every_length(tiny_checkpoint):
    times = prefill_step_times(
        tiny_checkpoint(seed=2), 1, batch=2, prompt_lens=[1, 5], repeats=2
    )
    assert list(times) == [1, 5]
    assert all(len(t) == 2 and all(s.step_s > 0 for s in t) for t in times.values())


def test_prefill_step_at_tp1_is_all_compute_and_rest(tiny_checkpoint):
    (step,) = prefill_step_times(
        tiny_checkpoint(seed=2), 1, batch=2, prompt_lens=[4], repeats=1
    )[4]
    assert step.all_reduce_s == step.gather_s == step.send_s == 0.0
    assert 0 < step.forward_s < step.step_s and step.compute_s == step.forward_s


def test_prefill_step_at_tp2_splits_rank0s_step_and_leaves_no_process(tiny_checkpoint):
    import multiprocessing as mp

    times = prefill_step_times(tiny_checkpoint(seed=2), 2, batch=2, prompt_lens=[3], repeats=1)
    (step,) = times[3]
    assert not mp.active_children()
    assert step.all_reduce_s > 0 and step.gather_s > 0 and step.send_s > 0
    assert 0 <= step.waiting_s <= step.all_reduce_s
    assert step.compute_s > 0 and step.rest_s > 0
    assert 0 < step.peer_start_s < step.step_s and 0 < step.peer_compute_s < step.step_s


def test_a_shard_alone_meets_no_other_rank(tiny_checkpoint):
    path = tiny_checkpoint(seed=2)
    (whole,) = prefill_step_times(path, 1, batch=2, prompt_lens=[4], repeats=1)[4]
    (shard,) = prefill_step_times(path, 1, batch=2, prompt_lens=[4], repeats=1, shard_of=2)[4]
    assert shard.waiting_s == shard.send_s == shard.peer_start_s == shard.peer_compute_s == 0.0
    assert shard.all_reduce_s > 0 and whole.all_reduce_s == 0  # counted, but a no-op


def test_threads_sets_rank0s_torch_threads_for_the_steps_only(tiny_checkpoint, monkeypatch):
    import torch

    seen = []
    step = __import__("minillm.engine", fromlist=["LLMEngine"]).LLMEngine.step

    def counting(self):
        seen.append(torch.get_num_threads())
        return step(self)

    monkeypatch.setattr("minillm.engine.LLMEngine.step", counting)
    before = torch.get_num_threads()
    prefill_step_times(
        tiny_checkpoint(seed=2), 1, batch=2, prompt_lens=[4], repeats=1, threads=3
    )
    assert seen and set(seen) == {3} and torch.get_num_threads() == before


@pytest.mark.parametrize(
    "bad",
    [
        {"batch": 0},
        {"repeats": 0},
        {"prompt_lens": [0]},
        {"shard_of": 0},
        {"shard_of": 2, "tensor_parallel_size": 2},
        {"threads": 0},
    ],
)
def test_prefill_step_times_refuses_a_bad_size(tiny_checkpoint, bad):
    args = {"tensor_parallel_size": 1, "batch": 2, "prompt_lens": [4], "repeats": 1} | bad
    with pytest.raises(ValueError):
        prefill_step_times(tiny_checkpoint(seed=2), **args)
