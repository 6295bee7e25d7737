"""engine.py — the LLM engine: a step loop that schedules, runs one mixed forward, samples, repeats.

    engine = LLMEngine(path)                       # or LLMEngine(model) for a loaded Transformer
    outputs = engine.generate(["Hello", [1, 2, 3]], SamplingParams(max_tokens=20))

Each `step()` asks the scheduler for a plan, lays the planned chunks out as one flat batch
(`build_batch`), runs `ModelRunner.forward` once, samples a token for every request whose chunk
reached its last token, and hands the tokens back to the scheduler. `generate` loops `step()` until
its requests finish; `stream` yields tokens as they are produced.
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from minillm.model import Transformer
from minillm.paged import BlockPool, PagedKVCache, num_blocks_for
from minillm.checking import as_int
from minillm.runner import ModelRunner, build_batch
from minillm.sampling import SamplingParams, sample
from minillm.scheduler import Scheduler, Sequence, StepPlan


@dataclass
class Output:
    """A finished request. Times are in seconds, measured from the moment it was added."""

    request_id: str
    prompt_ids: list[int]
    token_ids: list[int]
    text: str  # the decoded tokens ("" when the engine has no tokenizer)
    finish_reason: str  # "length" (max_tokens reached) or "stop" (a stop token or EOS)
    ttft: float  # time to first token
    itl: list[float]  # inter-token latencies: the gaps between consecutive tokens
    num_preemptions: int = 0

    @property
    def latency(self) -> float:
        """Time from submission to the last token."""
        return self.ttft + sum(self.itl)


@dataclass
class TokenEvent:
    """One token produced by one step for one request; `output` is set when that token finished it."""

    request_id: str
    token_id: int
    output: Output | None = None


@dataclass
class _Timing:
    added: float
    token_times: list[float] = field(default_factory=list)


class LLMEngine:
    def __init__(self, model: Transformer | str | Path | None = None, *, tokenizer=None, block_size: int = 16,
                 num_blocks: int | None = None, max_num_batched_tokens: int = 512, max_num_seqs: int = 16,
                 max_model_len: int | None = None, kv_cache_bytes: int = 1 << 30, eos_token_id: int | None = None,
                 device=None, dtype: torch.dtype = torch.float32, seed: int = 0, record_plans: bool = False):
        """model: a loaded Transformer, or a checkpoint folder (None: the book's default model).

        The KV pool gets `num_blocks` blocks, by default enough for max_num_seqs full-length requests
        but at most `kv_cache_bytes` of memory.
        """
        if model is None or isinstance(model, (str, Path)):
            from minillm.checkpoints import default_model_path

            path = Path(model) if model is not None else default_model_path()
            device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            model = Transformer.from_pretrained(path, dtype=dtype, device=device)
            if tokenizer is None and (path / "tokenizer.json").exists():
                from minillm.checkpoints import load_tokenizer

                tokenizer = load_tokenizer(path)
            if eos_token_id is None:
                eos_token_id = json.loads((path / "config.json").read_text()).get("eos_token_id")
        if not isinstance(model, Transformer):
            raise TypeError(f"model is a {type(model).__name__}: expected a Transformer or a checkpoint folder")
        cfg, weight = model.cfg, model.embed_tokens.weight
        self.model, self.tokenizer, self.device = model, tokenizer, weight.device
        if isinstance(eos_token_id, list):
            eos_token_id = eos_token_id[0] if eos_token_id else None
        self.eos_token_id = eos_token_id if eos_token_id is not None and eos_token_id < cfg.vocab_size else None
        self.max_model_len = max_model_len or min(cfg.max_position_embeddings, 4096)
        if num_blocks is None:
            wanted = max_num_seqs * num_blocks_for(self.max_model_len, block_size)
            num_blocks = max(1, min(wanted, kv_cache_bytes // PagedKVCache.bytes_per_block(model, block_size)))
        self.block_size = block_size
        self.kv = PagedKVCache.for_model(model, num_blocks, block_size)
        self.runner = ModelRunner(model, self.kv)
        self.scheduler = Scheduler(BlockPool(num_blocks), block_size, max_num_batched_tokens, max_num_seqs,
                                   self.max_model_len)
        self.rng = random.Random(seed)  # seeds for requests that bring none
        self.record_plans = record_plans
        self.plans: list[StepPlan] = []  # every step's plan, when record_plans is on (the notebook draws them)
        self.timings: dict[str, _Timing] = {}
        self._next_id = 0  # for automatic request ids
        self._num_added = 0

    # ---- requests in -------------------------------------------------------------------------------
    def make_sequence(self, prompt, params: SamplingParams | None = None, request_id: str | None = None) -> Sequence:
        """A Sequence for `prompt` (a string or a list of token ids), its ids checked; not yet submitted."""
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params is a {type(params).__name__}: expected SamplingParams")
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("this engine has no tokenizer, so prompts must be lists of token ids")
            ids = self.tokenizer(prompt).input_ids
        else:
            ids = list(prompt)
        V = self.model.cfg.vocab_size
        bad = [t for t in ids if as_int(t) is None or not 0 <= t < V]
        if bad:
            raise ValueError(f"prompt has token id {bad[0]!r}: expected ints in [0, {V})")
        ids = [int(t) for t in ids]  # numpy or tensor integers become plain ints
        if request_id is None:
            request_id = self._free_ids(1)[0]
        stops = set(params.stop_token_ids)
        if self.eos_token_id is not None and not params.ignore_eos:
            stops.add(self.eos_token_id)
        return Sequence(str(request_id), ids, params, stop_token_ids=frozenset(stops))

    def _free_ids(self, n: int) -> list[str]:
        """The next n automatic request ids ("req-0", "req-1", ...) nobody has used; reserves nothing."""
        ids, k = [], self._next_id
        while len(ids) < n:
            if f"req-{k}" not in self.scheduler.seen_ids:
                ids.append(f"req-{k}")
            k += 1
        return ids

    def add_request(self, prompt, params: SamplingParams | None = None, request_id: str | None = None) -> str:
        """Queue one request; returns its id. A bad request raises ValueError and leaves the engine as it was."""
        seq = self.make_sequence(prompt, params, request_id)
        self._submit(seq)
        return seq.request_id

    def _submit(self, seq: Sequence) -> None:
        self.scheduler.add(seq)  # raises for a bad request, before any engine state below changes
        seq.seed = seq.params.seed if seq.params.seed is not None else self.rng.randrange(1 << 62)
        seq.arrival = self._num_added
        self._num_added += 1
        while f"req-{self._next_id}" in self.scheduler.seen_ids:
            self._next_id += 1
        self.timings[seq.request_id] = _Timing(time.perf_counter())

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # ---- the step loop -----------------------------------------------------------------------------
    def step(self) -> list[TokenEvent]:
        """Schedule, run one forward over every planned chunk, sample, and record the new tokens."""
        plan = self.scheduler.schedule()
        if self.record_plans:
            self.plans.append(plan)
        if not plan.chunks:
            return []
        seqs = {s.request_id: s for s in self.scheduler.running}
        items = []
        for c in plan.chunks:
            seq = seqs[c.request_id]
            items.append((seq.tokens(c.num_computed, c.num_computed + c.num_new), c.num_computed,
                          seq.block_table, c.need_logits))
        batch = build_batch(items, self.block_size)
        logits = self.runner.forward(batch)  # [M, V]: one row per chunk that needs a token
        sampling = [seqs[c.request_id] for c in plan.chunks if c.need_logits]
        tokens = sample(logits, [s.params for s in sampling], [s.seed for s in sampling],
                        [len(s.output_ids) for s in sampling])
        finished = self.scheduler.update(plan, {s.request_id: t for s, t in zip(sampling, tokens)})
        now = time.perf_counter()
        for s in sampling:
            self.timings[s.request_id].token_times.append(now)
        done = {s.request_id: self._output(s) for s in finished}
        return [TokenEvent(s.request_id, t, done.get(s.request_id)) for s, t in zip(sampling, tokens)]

    def _output(self, seq: Sequence) -> Output:
        timing = self.timings.pop(seq.request_id)
        times = timing.token_times
        itl = [b - a for a, b in zip(times, times[1:])]
        text = self.tokenizer.decode(seq.output_ids) if self.tokenizer is not None else ""
        return Output(seq.request_id, seq.prompt_ids, list(seq.output_ids), text, seq.finish_reason,
                      times[0] - timing.added, itl, seq.num_preemptions)

    # ---- convenience loops -------------------------------------------------------------------------
    def _add_all(self, prompts, params) -> list[str]:
        """Check every request first, so one bad prompt rejects the call before any request is queued."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # a single prompt
        prompts = list(prompts)
        plist = params if isinstance(params, (list, tuple)) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(plist)} SamplingParams: expected one, or one per prompt")
        seqs = [self.make_sequence(p, sp, rid) for p, sp, rid in zip(prompts, plist, self._free_ids(len(prompts)))]
        for seq in seqs:
            self.scheduler.check(seq)
        for seq in seqs:
            self._submit(seq)
        return [seq.request_id for seq in seqs]

    def generate(self, prompts, params: SamplingParams | list[SamplingParams] | None = None,
                 progress: bool | None = None) -> list[Output]:
        """Run prompts to completion; outputs come back in the order of the prompts.

        progress: a tqdm bar counting finished requests (default: on for 16+ prompts in a terminal).
        Requests queued earlier with add_request advance too; their tokens are not returned here.
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
        finally:
            if bar is not None:
                bar.close()
        return [outputs[i] for i in ids]

    def stream(self, prompts, params: SamplingParams | list[SamplingParams] | None = None):
        """Yield (request_id, token_id, text_delta) as each token is produced; then the loop ends."""
        ids = self._add_all(prompts, params)
        pending, produced, shown = set(ids), {i: [] for i in ids}, {i: "" for i in ids}
        while pending:
            for ev in self.step():
                if ev.request_id not in pending:
                    continue
                produced[ev.request_id].append(ev.token_id)
                delta = ""
                if self.tokenizer is not None:  # decode the whole output: one token may complete a character
                    text = self.tokenizer.decode(produced[ev.request_id])
                    delta, shown[ev.request_id] = text[len(shown[ev.request_id]):], text
                yield ev.request_id, ev.token_id, delta
                if ev.output is not None:
                    pending.discard(ev.request_id)
