"""parallel/prefill.py: prefill steps timed at a tensor_parallel_size, for chapter 10."""

import pytest

from minillm.parallel.prefill import prefill_step_times


def test_prefill_step_times_returns_every_repeat_of_every_length(tiny_checkpoint):
    times = prefill_step_times(
        tiny_checkpoint(seed=2), 1, batch=2, prompt_lens=[1, 5], repeats=2
    )
    assert list(times) == [1, 5]
    assert all(len(t) == 2 and all(s > 0 for s in t) for t in times.values())


def test_prefill_step_times_at_tp2_leaves_no_process(tiny_checkpoint):
    import multiprocessing as mp

    times = prefill_step_times(tiny_checkpoint(seed=2), 2, batch=2, prompt_lens=[3], repeats=1)
    assert len(times[3]) == 1 and not mp.active_children()


@pytest.mark.parametrize("bad", [{"batch": 0}, {"repeats": 0}, {"prompt_lens": [0]}])
def test_prefill_step_times_refuses_a_bad_size(tiny_checkpoint, bad):
    args = {"batch": 2, "prompt_lens": [4], "repeats": 1} | bad
    with pytest.raises(ValueError):
        prefill_step_times(tiny_checkpoint(seed=2), 1, **args)
