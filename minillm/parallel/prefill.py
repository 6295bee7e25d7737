"""parallel/prefill.py — where tensor parallelism pays on this machine: prefill steps, measured.

A decode step of a few tokens computes little between its 2L + 1 all-reduces, so on a CPU the
collectives outweigh the halved compute. A prefill step of `batch x prompt_len` tokens computes
`prompt_len` times as much per all-reduce. `prefill_step_times` times such steps at a given
tensor_parallel_size, with the thread rule of `timing.decode_step_split` (every rank half the
machine's cores), so a TP=1 and a TP=2 run can be set side by side at several prompt lengths.
"""

from __future__ import annotations

import os
import time

import torch

from minillm.checking import check_int


def prefill_step_times(
    path, tensor_parallel_size: int, batch: int, prompt_lens: list[int], repeats: int = 3
) -> dict[int, list[float]]:
    """Seconds of `repeats` prefill steps of `batch` prompts of each length in `prompt_lens`, in
    one engine: each step prefills every prompt whole and samples one token, which ends the
    requests (no prefix cache, and fresh token ids each repeat). One warm-up step first."""
    from minillm.engine import LLMEngine
    from minillm.sampling import SamplingParams

    check_int("batch", batch, min=1)
    check_int("repeats", repeats, min=1)
    lens = [check_int("prompt_len", n, min=1) for n in prompt_lens]
    longest = max(lens)
    one = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))
    times: dict[int, list[float]] = {n: [] for n in lens}
    try:
        with LLMEngine(
            path, tensor_parallel_size=tensor_parallel_size, max_num_seqs=batch,
            max_num_batched_tokens=batch * longest, block_size=16,
            num_blocks=batch * -(-(longest + 1) // 16),
        ) as engine:  # fmt: skip
            for k, n in enumerate([lens[0]] + [n for n in lens for _ in range(repeats)]):
                for r in range(batch):  # fresh ids: no two prompts or repeats alike
                    engine.add_request([(7 * r + 3 * i + k) % 1000 + 10 for i in range(n)], one)
                start = time.perf_counter()
                engine.step()  # every prompt whole, then its one token: the requests end
                seconds = time.perf_counter() - start
                if engine.has_unfinished():
                    raise RuntimeError(f"{batch} x {n} tokens did not fit one prefill step")
                if k:  # step 0 is the warm-up
                    times[n].append(seconds)
    finally:
        torch.set_num_threads(threads)
    return times
