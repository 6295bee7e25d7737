"""Chapter 9's batch-8 loss split (minillm/notebook/spec_steps.py): a mixed step's parts are
the step's own requests, and timing them leaves the run unchanged."""

from __future__ import annotations

import torch

from minillm.engine import LLMEngine
from minillm.notebook.spec_steps import loss_passes, step_parts, sub_batch, timed_parts
from minillm.sampling import SamplingParams


def mixed_workload(model):
    # two running requests, one finishing early, so the third's prompt enters beside a decode
    g = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(model.cfg.vocab_size, (n,), generator=g).tolist() for n in (9, 7, 11)
    ]
    params = [SamplingParams(max_tokens=m, ignore_eos=True) for m in (2, 8, 5)]
    return prompts, params


def test_each_request_of_a_mixed_step_alone_gives_its_rows_of_the_whole(model):
    prompts, params = mixed_workload(model)
    engine = LLMEngine(model, eos_token_id=[], max_num_seqs=2)
    forward, mixed = engine.runner.forward, []

    def checked(batch):
        whole = forward(batch)  # [M, vocab]
        prompt, with_rows = step_parts(batch)
        if prompt and with_rows:
            mixed.append(batch)
            rows = batch.logits_indices.tolist()
            for i in range(batch.num_reqs):
                a, b = batch.query_start_loc[i], batch.query_start_loc[i + 1]
                mine = [m for m, j in enumerate(rows) if a <= j < b]
                alone = forward(sub_batch(batch, [i]))  # [len(mine), vocab]
                torch.testing.assert_close(alone, whole[mine], atol=1e-4, rtol=1e-4)
        return whole

    engine.runner.forward = checked
    got = [o.token_ids for o in engine.generate(prompts, params)]
    want = [o.token_ids for o in LLMEngine(model, eos_token_id=[]).generate(prompts, params)]
    assert mixed and got == want


def test_timing_the_parts_files_every_step_once_and_keeps_the_tokens(model):
    prompts, params = mixed_workload(model)
    engine = LLMEngine(model, eos_token_id=[], max_num_seqs=2)
    log: dict = {}
    engine.runner.forward = timed_parts(engine.runner.forward, log)
    got = [o.token_ids for o in engine.generate(prompts, params)]
    want = [o.token_ids for o in LLMEngine(model, eos_token_id=[]).generate(prompts, params)]
    assert got == want
    assert log["mixed"][0] == log["mixed: prompt"][0] == log["mixed: rows"][0] >= 1


def test_a_runs_parts_add_up_to_its_forward_time(model):
    prompts, _ = mixed_workload(model)
    spec = {"method": "ngram", "num_speculative_tokens": 2}
    (pair,) = loss_passes(model, prompts, 6, 2, spec, passes=1)
    for run in pair.values():
        p = run["parts"]
        assert abs(p["prompt"] + p["rows"] + p["sharing"] - p["total"]) < 1e-6
