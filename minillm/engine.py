"""engine.py — the LLM engine: a step loop that schedules, runs one mixed forward, samples,
repeats.

    engine = LLMEngine(path)                       # or LLMEngine(model) for a loaded
    Transformer outputs = engine.generate(["Hello", [1, 2, 3]], SamplingParams(max_tokens=20))

Each `step()` asks the scheduler for a plan, lays the planned chunks out as one flat batch
(`build_batch`), runs `ModelRunner.forward` once, samples a token for every request whose chunk
reached its last token, and hands the tokens back to the scheduler. `generate` loops `step()`
until its requests finish; `stream` yields tokens as they are produced.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import torch

from minillm.checking import as_int, check_int, check_int_list
from minillm.kernels import attention_backend_class
from minillm.model import Transformer
from minillm.outputs import Output, Timing, TokenEvent
from minillm.paged import DEFAULT_BLOCK_SIZE, BlockPool, PagedKVCache, num_blocks_for
from minillm.prefix_caching.kv_cache_manager import PrefixCacheStats
from minillm.prompts import prompt_ids, split_cache_salt, split_prompts
from minillm.runner import ModelRunner, build_batch
from minillm.sampling import SamplingParams, sample, token_logprobs
from minillm.scheduler import Scheduler, Sequence, StepPlan
from minillm.serving.detokenizer import IncrementalDetokenizer
from minillm.spec_decode.speculator import SpecDecodeStats, SpeculativeDecoder, count_step
from minillm.structured_output.bitmask import constrain_logits


def child_params(params: SamplingParams, index: int) -> SamplingParams:
    """The params of sample `index` of n: seed + index when seeded (as vLLM's parallel
    sampling), so the n differ."""
    import dataclasses

    return (
        params if params.seed is None else dataclasses.replace(params, seed=params.seed + index)
    )


class LLMEngine:
    def __init__(
        self,
        model: Transformer | str | Path | None = None,
        *,
        tokenizer=None,
        block_size: int = DEFAULT_BLOCK_SIZE,
        num_blocks: int | None = None,
        max_num_batched_tokens: int = 512,
        max_num_seqs: int = 16,
        max_model_len: int | None = None,
        kv_cache_bytes: int = 1 << 30,
        eos_token_id: int | list[int] | None = None,
        device=None,
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
        record_plans: bool = False,
        enable_prefix_caching: bool = False,
        speculative_config: dict | None = None,
        tensor_parallel_size: int = 1,
        attention_backend: str = "torch",
    ):
        """model: a loaded Transformer, or a checkpoint folder (None: the book's default model).

        The KV pool gets `num_blocks` blocks, by default enough for max_num_seqs full-length
        requests but at most `kv_cache_bytes` of memory. `max_model_len` defaults to the model's
        max_position_embeddings, capped at 4096. `eos_token_id` (an id or a list; [] for none)
        defaults to the checkpoint's (generation_config.json, else config.json).
        enable_prefix_caching (vLLM's name; off here, so that chapter 6 reads as before) reuses
        the KV blocks of prompt prefixes computed earlier (chapter 7). speculative_config
        (vLLM's name and keys; chapter 9, spec_decode/speculator.py) turns on speculative
        decoding, e.g. {"method": "ngram", "num_speculative_tokens": 4}. tensor_parallel_size N
        > 1 (chapter 10) splits every layer over N processes: N - 1 workers are spawned, each
        holding 1/N of the weights and KV cache; call close() (or use `with LLMEngine(...) as
        engine`) to stop them. attention_backend: "torch" or "triton" (chapter 11's kernels).
        Every argument is checked before anything is loaded or allocated.
        """
        block_size = check_int("block_size", block_size, min=1)
        attention_backend_class(
            attention_backend
        )  # a bad name fails here, before anything is loaded
        num_blocks = None if num_blocks is None else check_int("num_blocks", num_blocks, min=1)
        max_num_batched_tokens = check_int(
            "max_num_batched_tokens", max_num_batched_tokens, min=1
        )
        max_num_seqs = check_int("max_num_seqs", max_num_seqs, min=1)
        max_model_len = (
            None if max_model_len is None else check_int("max_model_len", max_model_len, min=1)
        )
        kv_cache_bytes = check_int("kv_cache_bytes", kv_cache_bytes, min=1)
        seed = check_int("seed", seed, min=0)
        if eos_token_id is not None:  # one id, or a list of them
            one = as_int(eos_token_id) is not None
            eos_token_id = (
                [check_int("eos_token_id", eos_token_id, min=0)]
                if one
                else check_int_list("eos_token_id", eos_token_id, min=0)
            )
        if not isinstance(dtype, torch.dtype):
            raise ValueError(
                f"dtype is {dtype!r}: expected a torch.dtype such as torch.float32"
            )
        if tokenizer is not None and not callable(getattr(tokenizer, "decode", None)):
            raise ValueError(
                f"tokenizer is {tokenizer!r}: expected a Hugging Face tokenizer (or None)"
            )
        for name, flag in [
            ("record_plans", record_plans),
            ("enable_prefix_caching", enable_prefix_caching),
        ]:
            if not isinstance(flag, bool):
                raise ValueError(f"{name} is {flag!r}: expected True or False")
        tensor_parallel_size = check_int("tensor_parallel_size", tensor_parallel_size, min=1)
        if (
            attention_backend != "torch" and tensor_parallel_size > 1
        ):  # the workers run chapter 4's attention
            raise ValueError(
                f"attention_backend={attention_backend!r} with "
                f"tensor_parallel_size={tensor_parallel_size}: "
                "the tensor-parallel workers use attention_backend='torch'"
            )
        if (
            speculative_config is not None and tensor_parallel_size > 1
        ):  # the draft would need its own shards
            raise ValueError(
                f"speculative_config with tensor_parallel_size={tensor_parallel_size}: "
                "speculative "
                "decoding runs with tensor_parallel_size=1 only in this book's engine"
            )
        self._tp_workers = None
        if tensor_parallel_size > 1 and not (
            model is None or isinstance(model, (str, os.PathLike))
        ):
            raise ValueError(
                f"tensor_parallel_size={tensor_parallel_size} needs a checkpoint folder (or "
                "None), not a "
                "loaded model: each rank loads its own shard from the files"
            )
        if model is None or isinstance(model, (str, os.PathLike)):
            from minillm.checkpoints import resolve_model

            path = resolve_model(model)  # a folder, `smollm2`, or None: the default model
            device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            if (
                tensor_parallel_size > 1
            ):  # rank 0's shard here, the other ranks in worker processes
                from minillm.parallel.workers import TensorParallelWorkers

                self._tp_workers = TensorParallelWorkers(
                    path, tensor_parallel_size, dtype=dtype, device=device
                )
                model = self._tp_workers.model
            else:
                model = Transformer.from_pretrained(path, dtype=dtype, device=device)
            if tokenizer is None and (path / "tokenizer.json").exists():
                from minillm.checkpoints import load_tokenizer

                tokenizer = load_tokenizer(path)
        if not isinstance(model, Transformer):
            raise TypeError(
                f"model is a {type(model).__name__}: expected a Transformer or a checkpoint "
                "folder"
            )
        cfg, weight = model.cfg, model.embed_tokens.weight
        if device is not None and torch.device(device).type != weight.device.type:
            raise ValueError(
                f"device is {device!r} but the model is on {weight.device}: expected the "
                "model's "
                "device (move it with model.to(device), or pass a checkpoint folder)"
            )
        max_len = min(cfg.max_position_embeddings, 4096)
        if max_model_len is not None:
            max_len = check_int("max_model_len", max_model_len, max=cfg.max_position_embeddings)
        self.model, self.tokenizer, self.device = model, tokenizer, weight.device
        generation = getattr(
            model, "generation_config", None
        )  # set by Transformer.from_pretrained
        if eos_token_id is None:
            eos_token_id = list(generation.eos_token_ids) if generation is not None else []
        # ids the model cannot produce (beyond its vocabulary) can never end a request, so they
        # are dropped
        self.eos_token_ids = frozenset(t for t in eos_token_id if t < cfg.vocab_size)
        self.default_sampling_params = SamplingParams(
            **(generation.sampling_defaults if generation else {})
        )
        self.max_model_len = max_len
        if num_blocks is None:
            wanted = max_num_seqs * num_blocks_for(self.max_model_len, block_size)
            num_blocks = max(
                1,
                min(wanted, kv_cache_bytes // PagedKVCache.bytes_per_block(model, block_size)),
            )
        self.block_size = block_size
        self.spec = (
            None
            if speculative_config is None
            else SpeculativeDecoder(speculative_config, model, num_blocks, block_size)
        )  # checked before the cache exists
        self.spec_stats = (
            SpecDecodeStats()
        )  # totals: proposals, acceptances, target forwards, output tokens
        self.request_spec_stats: dict[str, SpecDecodeStats] = {}
        self.kv = PagedKVCache.for_model(model, num_blocks, block_size)
        self.runner = (
            ModelRunner(model, self.kv, attention_backend=attention_backend)
            if self._tp_workers is None
            else self._tp_workers.runner(self.kv)
        )
        self.scheduler = Scheduler(
            BlockPool(num_blocks),
            block_size,
            max_num_batched_tokens,
            max_num_seqs,
            self.max_model_len,
            enable_prefix_caching=enable_prefix_caching,
        )
        self.rng = random.Random(seed)  # seeds for requests that bring none
        self.record_plans = record_plans
        self.plans: list[
            StepPlan
        ] = []  # every step's plan, when record_plans is on (the notebook draws them)
        self.timings: dict[str, Timing] = {}
        self._next_id = 0  # for automatic request ids
        self._num_added = 0
        self._grammars = None  # chapter 12's GrammarCache, made by the first structured request

    def close(self) -> None:
        """Stop the tensor-parallel worker processes, if any (also done at interpreter exit);
        idempotent."""
        if self._tp_workers is not None:
            self._tp_workers.close()

    def __enter__(self) -> LLMEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def get_default_sampling_params(self) -> SamplingParams:
        """The SamplingParams a request without its own gets: the checkpoint's
        generation_config.json
        defaults (temperature, top_k, top_p, max_new_tokens), as vLLM's `--generation-config
        auto`."""
        return self.default_sampling_params

    # ---- requests in
    #   -------------------------------------------------------------------------------
    def make_sequence(
        self,
        prompt,
        params: SamplingParams | None = None,
        request_id: str | None = None,
        fork_of: str | Sequence | None = None,
    ) -> Sequence:
        """A Sequence for `prompt` (see prompts.py for the accepted forms), its ids checked; not
        yet submitted.

        fork_of: the request (id or Sequence) this one is one of n samples of: the same prompt,
        whose full blocks it shares once they are computed instead of computing them again
        (SamplingParams.n).
        """
        params = self.default_sampling_params if params is None else params
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params is a {type(params).__name__}: expected SamplingParams")
        if request_id is not None and not isinstance(request_id, str):
            raise ValueError(
                f"request_id is {request_id!r}: expected a string (or None for an automatic "
                "one)"
            )
        prompt, cache_salt = split_cache_salt(prompt)
        ids = prompt_ids(prompt, self.tokenizer, self.model.cfg.vocab_size)
        if request_id is None:
            request_id = self._free_ids(1)[0]
        extras = (
            params.logprobs is not None
            or params.prompt_logprobs is not None
            or params.penalized
        )
        if self.spec is not None and extras:
            raise ValueError(
                "logprobs, prompt_logprobs, penalties and logit_bias are not supported with "
                "speculative decoding in this engine: expected a request without them"
            )
        bad = next((t for t, _ in params.logit_bias if t >= self.model.cfg.vocab_size), None)
        if bad is not None:
            raise ValueError(
                f"logit_bias names token id {bad}: expected ids < {self.model.cfg.vocab_size}"
            )
        stops = self.stop_token_ids(params)
        parent = fork_of
        if isinstance(fork_of, str):
            parent = next(
                (
                    q
                    for q in (*self.scheduler.waiting, *self.scheduler.running)
                    if q.request_id == fork_of
                ),
                None,
            )  # already finished: nothing left to share
        if parent is not None and (
            not isinstance(parent, Sequence) or parent.prompt_ids != ids
        ):
            raise ValueError(
                f"fork_of is {fork_of!r}: expected an unfinished request with the same prompt"
            )
        grammar = None
        if (
            params.structured_outputs is not None
        ):  # compiled once per spec; a matcher per request
            grammar = self.grammars.matcher(params.structured_outputs, stops, request_id)
        return Sequence(
            request_id,
            ids,
            params,
            stop_token_ids=stops,
            cache_salt=cache_salt,
            fork_of=parent,
            grammar=grammar,
        )

    def stop_token_ids(self, params: SamplingParams) -> frozenset[int]:
        """The tokens that end a request with these params: its stop_token_ids and, unless it
        ignores EOS, the model's EOS tokens."""
        stops = set(params.stop_token_ids)
        if not params.ignore_eos:
            stops |= self.eos_token_ids
        return frozenset(stops)

    @property
    def grammars(self):
        """The GrammarCache for this engine's tokenizer (chapter 12), made on first use."""
        if self._grammars is None:
            from minillm.structured_output.grammar import GrammarCache

            self._grammars = GrammarCache(self.tokenizer, self.model.cfg.vocab_size)
        return self._grammars

    def _free_ids(self, n: int) -> list[str]:
        """The next n automatic request ids ("req-0", "req-1", ...) nobody has used; reserves
        nothing."""
        ids, k = [], self._next_id
        while len(ids) < n:
            if f"req-{k}" not in self.scheduler.seen_ids:
                ids.append(f"req-{k}")
            k += 1
        return ids

    def add_request(
        self,
        prompt,
        params: SamplingParams | None = None,
        request_id: str | None = None,
        fork_of: str | None = None,
    ) -> str:
        """Queue one request; returns its id. A bad request raises ValueError and leaves the
        engine as it was.

        One request is one sequence, whatever params.n says; fork_of (a queued or running
        request's id, same prompt) makes it share that request's prompt blocks: how the server
        runs n > 1.
        """
        seq = self.make_sequence(prompt, params, request_id, fork_of)
        self._submit(seq)
        return seq.request_id

    def _submit(self, seq: Sequence) -> None:
        self.scheduler.add(
            seq
        )  # raises for a bad request, before any engine state below changes
        seq.seed = (
            seq.params.seed if seq.params.seed is not None else self.rng.randrange(1 << 62)
        )
        seq.arrival = self._num_added
        self._num_added += 1
        while f"req-{self._next_id}" in self.scheduler.seen_ids:
            self._next_id += 1
        self.timings[seq.request_id] = Timing(time.perf_counter())
        self.request_spec_stats[seq.request_id] = SpecDecodeStats()

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def abort_request(self, request_id: str | list[str]) -> None:
        """Stop one request (or a list of them) now: its blocks go back to the pool at once, it
        produces
        no more tokens and no Output, and the other requests run on as if it had never been
        there. Ids that already finished are ignored (they may finish just before the abort
        arrives, as in vLLM); an id this engine never saw raises ValueError, and nothing is
        aborted."""
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        for rid in ids:
            if not isinstance(rid, str) or rid not in self.scheduler.seen_ids:
                raise ValueError(
                    f"request_id {rid!r} was never submitted to this engine: expected one "
                    "that add_request, generate or stream returned"
                )
        for rid in ids:
            if self.scheduler.abort(rid) is not None:
                self.timings.pop(rid, None)
                self.request_spec_stats.pop(rid, None)
                if self.spec is not None:
                    self.spec.proposer.forget(rid)

    def _unfinished(self, ids) -> set[str]:
        """The ids among `ids` still waiting or running (not finished, not aborted)."""
        live = {s.request_id for s in self.scheduler.waiting} | {
            s.request_id for s in self.scheduler.running
        }
        return live & set(ids)

    # ---- the step loop
    #   -----------------------------------------------------------------------------
    def step(self) -> list[TokenEvent]:
        """Schedule, run one forward over every planned chunk, sample, and record the new
        tokens."""
        if self.spec is not None:
            # chapter 9: proposals for running decodes, which the plan then verifies
            self.spec.propose(self.scheduler)
        plan = self.scheduler.schedule()
        if self.record_plans:
            self.plans.append(plan)
        if not plan.chunks:
            return []
        seqs = {s.request_id: s for s in self.scheduler.running}
        items, rows = [], []
        for c in plan.chunks:
            seq = seqs[c.request_id]
            # a verify's proposals are not in seq yet
            end = c.num_computed + c.num_new - len(c.spec_token_ids)
            # chapter 8: prompt logprobs need every row of a prefill chunk (each predicts the
            # next prompt token)
            n_rows = (
                c.num_new
                if seq.params.prompt_logprobs is not None and c.kind == "prefill"
                else c.num_logits
            )
            ids = seq.tokens(c.num_computed, end) + list(c.spec_token_ids)
            items.append((ids, c.num_computed, seq.block_table, n_rows))
            rows.append(n_rows)
        batch = build_batch(items, self.block_size)
        # [M, V]: one row per chunk that needs a token (k+1 for a verify)
        logits = self.runner.forward(batch)
        if any(r != c.num_logits for r, c in zip(rows, plan.chunks)):
            # chapter 8: prompt logprobs recorded; only the sampling rows stay
            logits = self._take_prompt_logprobs(plan.chunks, rows, seqs, logits)
        # chapter 12: forbidden tokens of constrained rows to -inf, before any sampling step
        logits = constrain_logits(logits, plan.chunks, seqs)
        sampling = [seqs[c.request_id] for c in plan.chunks if c.need_logits]
        if self.spec is None:
            params = [s.params for s in sampling]
            seeds, steps = [s.seed for s in sampling], [len(s.output_ids) for s in sampling]
            histories = [(s.prompt_ids, s.output_ids) for s in sampling]  # for penalties only
            tokens = sample(logits, params, seeds, steps, histories)
            sampled = {s.request_id: t for s, t in zip(sampling, tokens)}
            want = [i for i, sp in enumerate(params) if sp.logprobs is not None]
            # chapter 8: logprobs of the raw logits (vLLM's default), before any penalty
            if want:
                lps = token_logprobs(
                    logits[want], [tokens[i] for i in want], [params[i].logprobs for i in want]
                )
                for i, lp in zip(want, lps):
                    sampling[i].logprobs.append(lp)
        else:  # chapter 9: an int per request, a list per verify
            sampled = self.spec.sample(logits, plan.chunks, seqs)
        before = {s.request_id: len(s.output_ids) for s in sampling}
        finished = self.scheduler.update(plan, sampled)
        count_step(self.spec_stats, self.request_spec_stats, plan, sampling, before, sampled)
        if self.spec is not None:  # requests that lost their blocks lose their draft K/V too
            for rid in set(plan.preempted) | {
                s.request_id for s in sampling if s.status == "finished"
            }:
                self.spec.proposer.forget(rid)
        now = time.perf_counter()
        events = []
        for s in sampling:
            # what update kept (a stop inside a verified run ends it)
            new = s.output_ids[before[s.request_id] :]
            self.timings[s.request_id].token_times.extend([now] * len(new))
            lp = s.logprobs[-1] if s.params.logprobs is not None and new else None
            events += [TokenEvent(s.request_id, t, logprobs=lp) for t in new]
            if new and before[s.request_id] == 0 and s.params.prompt_logprobs is not None:
                # chapter 8: prompt logprobs ride on the request's first token
                events[-len(new)].prompt_logprobs = s.prompt_logprobs
        done = {s.request_id: self._output(s) for s in finished}
        for ev in reversed(events):  # a finished request's Output rides on its last token
            if ev.request_id in done:
                ev.output = done.pop(ev.request_id)
        return events

    def _take_prompt_logprobs(self, chunks, rows, seqs, logits: torch.Tensor) -> torch.Tensor:
        """Record the prompt logprobs in prefill chunks' rows; return only the rows the sampler
        needs.

        Row j of a chunk starting at position k holds the logits after token k + j, so it scores
        prompt token k + j + 1; a chunked prefill fills seq.prompt_logprobs chunk by chunk. Rows
        already scored (a prefill started again after a preemption) are skipped.
        """
        keep, start = [], 0
        for c, r in zip(chunks, rows):
            seq = seqs[c.request_id]
            if r != c.num_logits:
                if not seq.prompt_logprobs:
                    seq.prompt_logprobs.append(
                        None
                    )  # the first prompt token has no context to be scored by
                k, P, done = c.num_computed, len(seq.prompt_ids), len(seq.prompt_logprobs)
                js = range(max(0, done - 1 - k), min(r, P - 1 - k))
                for j0 in range(
                    js.start, js.stop, 64
                ):  # 64 rows at a time: [64, V] float32 stays small
                    j1 = min(j0 + 64, js.stop)
                    targets = seq.prompt_ids[k + j0 + 1 : k + j1 + 1]
                    seq.prompt_logprobs += token_logprobs(
                        logits[start + j0 : start + j1],
                        targets,
                        [seq.params.prompt_logprobs] * (j1 - j0),
                    )
            if c.num_logits:
                keep.append(start + r - 1)  # the last row is the one the sampler needs
            start += r
        return logits[keep]

    def _output(self, seq: Sequence) -> Output:
        timing = self.timings.pop(seq.request_id)
        times = timing.token_times
        itl = [b - a for a, b in zip(times, times[1:])]
        shown = seq.output_ids
        if seq.finish_reason == "stop" and shown and shown[-1] in seq.stop_token_ids:
            shown = shown[:-1]  # the stop token ends the text without its own, as on the server
        text = self.tokenizer.decode(shown) if self.tokenizer is not None else ""
        return Output(
            seq.request_id,
            seq.prompt_ids,
            list(seq.output_ids),
            text,
            seq.finish_reason,
            times[0] - timing.added,
            itl,
            seq.num_preemptions,
            seq.num_cached_tokens or 0,
            self.request_spec_stats.pop(seq.request_id),
            seq.prompt_logprobs if seq.params.prompt_logprobs is not None else None,
            seq.logprobs if seq.params.logprobs is not None else None,
        )

    @property
    def stats(self) -> PrefixCacheStats:
        """Totals so far: cache lookups, query and hit tokens, hit rate, tokens computed. Each
        plan has its step's."""
        return self.scheduler.stats

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block, e.g. between benchmark rounds; refused (False) while
        requests hold blocks."""
        return self.scheduler.kv.reset()

    # ---- convenience loops
    #   -------------------------------------------------------------------------
    def _add_all(self, prompts, params) -> list[str]:
        """Check every request first, so one bad prompt rejects the call before any request is
        queued."""
        prompts = split_prompts(prompts)
        plist = list(params) if isinstance(params, (list, tuple)) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(
                f"{len(prompts)} prompts but {len(plist)} SamplingParams: expected one, or "
                "one per prompt"
            )
        # params.n > 1: n sequences per prompt, the later ones forks of the first (outputs
        # prompt-major)
        counts = [sp.n if isinstance(sp, SamplingParams) else 1 for sp in plist]
        rids, seqs = iter(self._free_ids(sum(counts))), []
        for p, sp, n in zip(prompts, plist, counts):
            first = self.make_sequence(p, sp, next(rids))
            seqs += [first] + [
                self.make_sequence(p, child_params(sp, i), next(rids), fork_of=first)
                for i in range(1, n)
            ]
        for seq in seqs:
            self.scheduler.check(seq)
        for seq in seqs:
            self._submit(seq)
        return [seq.request_id for seq in seqs]

    def generate(
        self,
        prompts,
        params: SamplingParams | list[SamplingParams] | None = None,
        progress: bool | None = None,
    ) -> list[Output]:
        """Run prompts to completion; outputs come back in the order of the prompts.

        prompts: one prompt or any iterable of them (see prompts.py); params: one SamplingParams
        for all, one per prompt, or None for `get_default_sampling_params()`. progress: a tqdm
        bar counting finished requests (default: on for 16+ prompts in a terminal). Requests
        queued earlier with add_request advance too; their tokens are not returned here. If the
        call is interrupted (an exception, Ctrl-C), its unfinished requests are aborted.
        """
        ids = self._add_all(prompts, params)
        if progress is None:
            progress = len(ids) >= 16 and sys.stderr.isatty()
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(ids), desc="requests", unit="req")
        wanted, outputs = set(ids), {}
        try:
            while len(outputs) < len(ids):
                for ev in self.step():
                    if ev.output is not None and ev.request_id in wanted:
                        outputs[ev.request_id] = ev.output
                        if bar is not None:
                            bar.update(1)
                if not self._unfinished(wanted - outputs.keys()) and len(outputs) < len(ids):
                    missing = sorted(wanted - outputs.keys())
                    raise RuntimeError(f"requests {missing} were aborted before they finished")
        finally:
            if bar is not None:
                bar.close()
            left = self._unfinished(wanted - outputs.keys())
            if left:
                self.abort_request(sorted(left))
        return [outputs[i] for i in ids]

    def stream(self, prompts, params: SamplingParams | list[SamplingParams] | None = None):
        """Yield (request_id, token_id, text_delta) as each token is produced; then the loop
        ends.

        text_delta holds only whole characters (see serving/detokenizer.py): a character split
        over several tokens arrives with the token that completes it. Closing the generator
        early (`break`, `.close()`, an exception in the loop) aborts its unfinished requests;
        aborting one of them with `abort_request` ends its part of the stream.
        """
        ids = self._add_all(prompts, params)
        pending = set(ids)
        text = (
            {i: IncrementalDetokenizer(self.tokenizer) for i in ids}
            if self.tokenizer is not None
            else None
        )
        sent = dict.fromkeys(ids, "")  # the text yielded so far, per request
        try:
            while pending:
                for ev in self.step():
                    if ev.request_id not in pending:
                        continue
                    delta = ""
                    if text is not None and ev.output is None:
                        delta = text[ev.request_id].add(ev.token_id)
                    elif text is not None:  # the last token: the rest of the Output's text
                        # (bytes held back, and never a stop token's own text)
                        delta = ev.output.text[len(sent[ev.request_id]) :]
                    sent[ev.request_id] += delta
                    if ev.output is not None:
                        pending.discard(ev.request_id)
                    yield ev.request_id, ev.token_id, delta
                pending = self._unfinished(
                    pending
                )  # drop requests aborted while we were yielding
        finally:
            left = self._unfinished(pending)
            if left:
                self.abort_request(sorted(left))
