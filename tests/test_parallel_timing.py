"""Chapter 10's measurements: the gloo all-reduce timers and the interleaved decode steps run,
return every call or step, and refuse bad arguments by name (no timing is asserted)."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from minillm.parallel.timing import all_reduce_times


def test_all_reduce_times_every_call_of_every_size():
    times = all_reduce_times([4, 4096], repeats=3)
    assert sorted(times) == [4, 4096] and all(len(calls) == 3 for calls in times.values())
    assert all(t > 0 for calls in times.values() for t in calls)


@pytest.mark.parametrize("bad", [0, 3, 2.5, True])
def test_a_message_below_one_float_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=f"message size {bad!r}"):
        all_reduce_times([8, bad])


def test_waiting_is_the_time_before_the_last_rank_arrives():
    from minillm.parallel.timing import StepSplit, waiting_and_transfer
    from minillm.parallel.workers import RankTimes

    # rank 0 enters at 1.0 and rank 1 at 3.0: rank 0 waits 2; both then spend 1 in the transfer.
    # In the second call rank 1 is first and waits 0.5 for rank 0
    rank1 = RankTimes(0.1, 10.0, [(3.0, 4.0), (5.0, 5.6)])
    s = StepSplit(12.0, 0.2, [rank1], [(1.0, 4.0), (5.5, 6.0)])
    assert (s.collectives_s, rank1.collectives_s) == pytest.approx((3.5, 1.6))
    (w0, t0), (w1, t1) = waiting_and_transfer([s.calls, rank1.calls])
    assert (w0, t0) == pytest.approx((2.0, 1.5)) and (w1, t1) == pytest.approx((0.5, 1.1))
    with pytest.raises(ValueError, match=r"\[2, 1\] collective calls"):
        waiting_and_transfer([s.calls, [(3.0, 4.0)]])


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="Linux only")
def test_run_queue_counts_the_time_a_ready_process_waits_for_a_core():
    from minillm.parallel.processes import run_queue_s

    # More busy processes than cores, all on this one core: each waits for the others.
    # (The children inherit this process's affinity, set first.)
    before, mask = run_queue_s(all_threads=True), os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(mask)})
    try:
        ctx = multiprocessing.get_context("fork")
        spinners = [ctx.Process(target=_spin, args=(0.3,)) for _ in range(2)]
        for p in spinners:
            p.start()
        _spin(0.3)
        for p in spinners:
            p.join()
    finally:
        os.sched_setaffinity(0, mask)
    waited = run_queue_s(all_threads=True) - before
    assert waited > 0.05  # this process alone: about two thirds of 0.3 s on a shared core
    assert run_queue_s() <= run_queue_s(all_threads=True)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_comm_stats_keep_each_call_only_when_asked():
    import time

    from minillm.parallel.layers import CommStats

    stats = CommStats()
    stats.clock(time.perf_counter())  # a long-lived engine: counts, but no list that grows
    assert stats.calls == [] and stats.seconds >= 0
    stats.record_calls = True
    stats.clock(time.perf_counter())
    assert len(stats.calls) == 1 and stats.calls[0][0] <= stats.calls[0][1]
    stats.reset()
    assert stats.calls == [] and stats.record_calls


def test_a_shard_without_peers_keeps_its_own_sums_and_repeats_its_logits():
    import torch

    from minillm.parallel.timing import _NoPeers

    group, x = _NoPeers(0, 2), torch.arange(6.0).view(2, 3)
    assert torch.equal(group.all_reduce(x.clone()), x)  # nothing added from another rank
    assert torch.equal(group.gather_last_dim(x, 5), torch.cat([x, x], -1)[:, :5])
    assert group.stats.all_reduce == 1 and group.stats.gather == 1


def test_a_shard_past_rank_0_without_peers_still_gets_logits():
    import torch

    from minillm.parallel.timing import _NoPeers

    x = torch.arange(6.0).view(2, 3)
    assert torch.equal(_NoPeers(1, 2).gather_last_dim(x, 5), torch.cat([x, x], -1)[:, :5])


def test_all_reduces_with_work_between_split_waiting_from_transfer():
    from minillm.parallel.timing import all_reduce_between_times

    for work in (None, (2, 8, 16)):
        seqs = all_reduce_between_times(64, calls=4, work=work, repeats=2)
        assert len(seqs) == 2
        for ranks in seqs:
            assert len(ranks) == 2 and all(w >= 0 and t > 0 for w, t in ranks)


@pytest.mark.parametrize("work", [(2, 8), (2, 0, 16)])
def test_work_between_all_reduces_is_refused_by_name(work):
    from minillm.parallel.timing import all_reduce_between_times

    with pytest.raises(ValueError, match="work"):
        all_reduce_between_times(64, calls=2, work=work)


def test_all_reduce_two_ways_every_call_of_every_sequence_both_ways():
    from minillm.parallel.timing import all_reduce_two_ways

    ways = all_reduce_two_ways(4096, calls=3, rounds=2)
    assert list(ways) == ["barrier before each call", "back to back"]
    for seqs in ways.values():
        assert len(seqs) == 2 and all(len(seq) == 3 for seq in seqs)
        for call in (c for seq in seqs for c in seq):
            (w0, t0), (w1, t1) = call  # rank 0, rank 1: one of them waits for the other
            assert min(w0, w1) == 0 and t0 > 0 and t1 > 0
    with pytest.raises(ValueError, match="message size 3"):
        all_reduce_two_ways(3, calls=2)


def test_each_rank_gets_its_own_cores_when_there_are_enough():
    from minillm.parallel.processes import cores_of

    mask = os.sched_getaffinity(0)
    ranks = [cores_of(r, 2) for r in range(2)]
    assert all(cores and cores <= mask for cores in ranks)
    if len(mask) >= 2:
        assert not ranks[0] & ranks[1]


def test_pin_threads_moves_every_thread_of_the_process():
    import threading

    from minillm.parallel.processes import pin_threads

    mask, core = os.sched_getaffinity(0), {min(os.sched_getaffinity(0))}
    done = threading.Event()
    helper = threading.Thread(target=done.wait)  # a second thread, started before the pin
    helper.start()
    try:
        pin_threads(os.getpid(), core)
        tids = [int(t) for t in os.listdir("/proc/self/task")]
        assert len(tids) >= 2 and all(os.sched_getaffinity(t) == core for t in tids)
    finally:
        pin_threads(os.getpid(), mask)
        done.set()
        helper.join()
    assert os.sched_getaffinity(0) == mask


def test_interleaved_steps_clock_every_engine_and_give_the_cores_back(model_path):
    from minillm.parallel.interleaved import interleaved_decode_steps
    from minillm.parallel.timing import waiting_and_transfer

    mask = os.sched_getaffinity(0)
    out = interleaved_decode_steps(model_path, batch=2, prompt_len=5, steps=3)
    assert os.sched_getaffinity(0) == mask and out.pinned
    assert len(out.tp1) == len(out.shard) == len(out.tp2) == len(out.tp2_forward) == 3
    for step, forward, queued in out.tp1 + out.shard:
        assert 0 < forward < step and queued >= 0
    for s, forward in zip(out.tp2, out.tp2_forward):
        (rank1,) = s.workers  # it starts after rank 0 sent the batch, inside rank 0's step
        assert 0 < s.collectives_s < forward < s.step_s and rank1.forward_s > 0
        assert 0 < s.send_s < s.step_s and 0 < rank1.handover_s < s.step_s
        assert 0 < rank1.collectives_s < rank1.forward_s
        # 2L + 1 all-reduces and the logits' gather on each rank, each call's run-queue wait
        # on both ranks, and the step's over all threads
        assert len(s.calls) == len(rank1.calls) == 2 * 2 + 2
        assert len(s.queued) == len(rank1.queued) == len(s.calls)
        assert all(0 <= q <= b - a for q, (a, b) in zip(rank1.queued, rank1.calls))
        assert s.queued_s >= 0 and rank1.queued_s >= 0
        # waiting and transfer add up to each rank's time inside the collectives
        for (wait, transfer), inside in zip(
            waiting_and_transfer([s.calls, rank1.calls]),
            (s.collectives_s, rank1.collectives_s),
            strict=True,
        ):
            assert wait >= 0 and transfer >= 0
            assert abs(wait + transfer - inside) < 1e-6


def test_pinned_all_reduces_with_work_between_run_on_both_ranks():
    from minillm.parallel.timing import all_reduce_between_times

    seqs = all_reduce_between_times(64, calls=3, work=(2, 8, 16), repeats=2, pin=True)
    assert len(seqs) == 2 and all(len(ranks) == 2 for ranks in seqs)
