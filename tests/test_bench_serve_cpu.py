"""What bench-serve and chapter 8 read about CPU use: a process's CPU seconds split between its
main thread and the rest, and the torch thread count the server's engine thread steps with."""

import os
import threading
import time

import torch

from minillm.bench.serve import cpu_seconds
from minillm.engine import LLMEngine
from minillm.serving.async_engine import AsyncEngine


def burn(seconds: float) -> None:
    """Use `seconds` of this thread's CPU time, however busy the machine is."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_cpu_seconds_counts_another_threads_work_apart_from_the_main_thread():
    main0, other0 = cpu_seconds(os.getpid())
    worker = threading.Thread(target=burn, args=(0.3,))
    worker.start()
    worker.join()
    main1, other1 = cpu_seconds(os.getpid())
    assert other1 - other0 >= 0.25  # ticks of 10 ms: the 0.3 s burned, give or take a few
    assert main1 - main0 < 0.15  # the main thread only waited
    burn(0.3)
    main2, other2 = cpu_seconds(os.getpid())
    assert main2 - main1 >= 0.25 and other2 - other1 < 0.15


def test_stats_reports_the_torch_threads_of_the_engine_thread(tiny_default_path):
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # a global setting: the engine thread sees it too
        front = AsyncEngine(LLMEngine(tiny_default_path))
        try:
            deadline = time.monotonic() + 10
            while front.stats()["torch_threads"] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)  # the thread records it as it starts
            assert front.stats()["torch_threads"] == 1
        finally:
            front.shutdown()
    finally:
        torch.set_num_threads(threads)


def test_bench_serve_saves_the_cpu_seconds_of_each_side_every_round(
    tiny_default_path, tmp_path
):
    """Every server round keeps the CPU seconds of the load generator, the server's event loop
    and its other threads; every offline round those of the offline engine's process."""
    import argparse
    import json

    from minillm.bench import serve as bench_serve
    from minillm.cli.serve_args import add_bench_serve_args

    p = argparse.ArgumentParser()
    add_bench_serve_args(p)
    save = tmp_path / "serve.json"
    args = p.parse_args(
        ["--model", str(tiny_default_path), "--num-prompts", "4", "--random-input-len", "8"]
        + ["--random-output-len", "8", "--max-concurrency", "2", "--repeats", "2"]
        + ["--save", str(save)]
    )
    assert bench_serve.main(args) == 0
    saved = json.loads(save.read_text())
    (row,) = saved["runs"]
    for r in row["rounds"]:
        # each side did work: the client parsed streams, the loop wrote them, the engine stepped
        assert r["client_cpu_s"] > 0 and r["server_engine_cpu_s"] > 0
        assert r["server_loop_cpu_s"] >= 0
        # no side used more CPU than the machine's cores could give in the round, give or take
        # the 10 ms ticks
        cores = os.cpu_count() or 1
        assert r["client_cpu_s"] <= cores * r["duration_s"] + 0.05
    assert all(o["cpu_s"] > 0 for o in saved["workload"]["offline_rounds"])
    # the load before the command (what else ran) and after it, both saved
    assert all(saved["workload"][k] >= 0 for k in ("load_average_before", "load_average_after"))


def test_steady_throughput_counts_completions_between_the_4th_and_the_20th():
    from minillm.bench.serve import RequestResult, steady_throughput

    # 24 requests finishing every 0.1 s from t = 1, then a slow drain the whole-run rate counts
    ends = [1 + 0.1 * k for k in range(20)] + [10, 11, 12, 13]
    results = [RequestResult(True, latency=e - 0.5, sent=0.5) for e in ends]
    assert abs(steady_throughput(results) - 16 / 1.6) < 1e-9  # 16 completions in 1.6 s
    assert steady_throughput(results[:10]) != steady_throughput(results[:10])  # too few: nan
