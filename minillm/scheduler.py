"""scheduler.py — continuous batching: which requests, and how many of their tokens, run in each
step.

A request moves waiting -> running -> finished. Every step has a token budget
(`max_num_batched_tokens`) and a cap on running requests (`max_num_seqs`). The scheduler first
gives each running request what it needs (one token for a decode, the next chunk for a prompt
still being prefilled) in the order they were (re)admitted, then admits waiting requests first
come, first served, cutting the last prompt into a chunk that fits the budget. KV blocks come
from a `BlockPool`; when the pool runs dry, the newest running request is preempted: its blocks
are freed and it goes back to the front of the queue, to recompute its prompt and the tokens it
already produced when there is room again. Blocks are the `KVCacheManager`'s business
(prefix_caching/kv_cache_manager.py): with prefix caching on, a request being admitted first
asks it for its cached prefix, and its first chunk starts after it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from minillm.checking import as_int, check_int
from minillm.paged import BlockPool, num_blocks_for
from minillm.prefix_caching.kv_cache_manager import KVCacheManager, PrefixCacheStats
from minillm.sampling import SamplingParams


@dataclass
class Sequence:
    """One request's state: its tokens, how many have K/V in the cache, and where those K/V
    live."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    arrival: int = 0  # submission order; a smaller number is an older request
    seed: int = 0  # the sampling seed (params.seed, or one the engine chose)
    stop_token_ids: frozenset[int] = frozenset()  # params' stop tokens plus the model's EOS
    output_ids: list[int] = field(default_factory=list)
    status: str = "waiting"  # "waiting" | "running" | "finished"
    num_computed: int = 0  # tokens whose K/V are in the cache
    block_table: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # "length" | "stop" | "abort"
    num_preemptions: int = 0
    cache_salt: str | None = (
        None  # enters the prefix cache's first digest: only equal salts share blocks
    )
    num_cached_tokens: int | None = (
        None  # prompt tokens found in the prefix cache at first admission
    )
    spec_token_ids: list[int] = field(
        default_factory=list
    )  # proposals to verify in the next step (chapter 9)
    # params.prompt_logprobs: (logprob, [(id, logprob)] top) per prompt token, None for the
    # first (no context)
    prompt_logprobs: list = field(default_factory=list)
    logprobs: list = field(default_factory=list)  # params.logprobs: the same per sampled token
    fork_of: Sequence | None = (
        None  # n > 1: the first of the n, whose prompt blocks this one shares
    )
    # chapter 12: the request's grammar matcher (structured_output/matcher.py), or None
    grammar: object | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    def append_output(self, token: int) -> bool:
        """Append one sampled token; True (with finish_reason set) if it ends the request.

        A request with a grammar advances its matcher here, with the token: the matcher follows
        the output tokens, and a grammar that reaches its end stops the request ("stop").
        """
        self.output_ids.append(token)
        if self.grammar is not None:
            self.grammar.accept(token)
        if token in self.stop_token_ids or (
            self.grammar is not None and self.grammar.is_terminated
        ):
            self.finish_reason = "stop"
        elif len(self.output_ids) >= self.params.max_tokens:
            self.finish_reason = "length"
        return self.finish_reason is not None

    def tokens(self, start: int, end: int) -> list[int]:
        """Token ids [start, end) of prompt + output, without building the whole list."""
        P = len(self.prompt_ids)
        if end <= P:
            return self.prompt_ids[start:end]
        if start >= P:
            return self.output_ids[start - P : end - P]
        return self.prompt_ids[start:] + self.output_ids[: end - P]


@dataclass
class ScheduledChunk:
    """What one request computes in one step: num_new tokens after its num_computed cached
    ones."""

    request_id: str
    num_computed: int
    num_new: int
    # "prefill" (prompt tokens), "decode" (its last sampled token), "recompute" (after
    # preemption) or
    kind: str
    # "verify" (its last sampled token and the proposals after it: chapter 9)
    need_logits: (
        bool  # the chunk reaches the request's last token, so the step samples its next token
    )
    spec_token_ids: tuple[
        int, ...
    ] = ()  # a verify's proposals: the last len() of its num_new tokens

    @property
    def num_logits(self) -> int:
        """Rows of logits the chunk needs: one per proposal and one after the last token (none
        mid-prompt)."""
        return 1 + len(self.spec_token_ids) if self.need_logits else 0


@dataclass
class StepPlan:
    """One step: the chunks to run in one forward, and the requests preempted to make room."""

    step: int
    chunks: list[ScheduledChunk]
    preempted: list[str]
    cache: PrefixCacheStats = field(
        default_factory=PrefixCacheStats
    )  # this step's lookups, hits, computed tokens

    @property
    def num_tokens(self) -> int:
        return sum(c.num_new for c in self.chunks)


class Scheduler:
    def __init__(
        self,
        pool: BlockPool,
        block_size: int,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        max_model_len: int,
        enable_prefix_caching: bool = False,
    ):
        if not isinstance(pool, BlockPool):
            raise ValueError(f"pool is {pool!r}: expected a BlockPool")
        block_size = check_int("block_size", block_size, min=1)
        max_num_batched_tokens = check_int(
            "max_num_batched_tokens", max_num_batched_tokens, min=1
        )
        max_num_seqs = check_int("max_num_seqs", max_num_seqs, min=1)
        max_model_len = check_int("max_model_len", max_model_len, min=1)
        if not isinstance(enable_prefix_caching, bool):
            raise ValueError(
                f"enable_prefix_caching is {enable_prefix_caching!r}: expected True or False"
            )
        self.pool, self.block_size = pool, block_size
        self.kv = KVCacheManager(pool, block_size, enable_caching=enable_prefix_caching)
        self.stats = PrefixCacheStats()  # totals over every step
        self.max_num_batched_tokens, self.max_num_seqs, self.max_model_len = (
            max_num_batched_tokens,
            max_num_seqs,
            max_model_len,
        )
        self.waiting: deque[Sequence] = deque()  # oldest first
        self.running: list[Sequence] = []  # oldest first; the newest is preempted first
        self.seen_ids: set[str] = (
            set()
        )  # every id ever submitted, so a repeat is caught even after it finished
        self.num_steps = 0
        self.num_applied = 0  # the last step whose plan `update` recorded: a plan counts once

    def check(self, seq: Sequence) -> None:
        """Raise ValueError if `seq` can never be served; changes nothing."""
        n_prompt, max_tokens = len(seq.prompt_ids), seq.params.max_tokens
        if seq.request_id in self.seen_ids:
            raise ValueError(
                f"request id {seq.request_id!r} was already submitted: expected a new id"
            )
        if n_prompt == 0:
            raise ValueError(
                f"request {seq.request_id!r} has an empty prompt: expected at least one token"
            )
        if n_prompt + max_tokens > self.max_model_len:
            raise ValueError(
                f"request {seq.request_id!r} needs {n_prompt} prompt + {max_tokens} new "
                "tokens = "
                f"{n_prompt + max_tokens}, beyond the model's context of {self.max_model_len}"
            )
        # The last sampled token is never fed back, so at most prompt + max_tokens - 1 tokens
        # need K/V.
        need = num_blocks_for(n_prompt + max_tokens - 1, self.block_size)
        if need > self.pool.num_blocks:
            raise ValueError(
                f"request {seq.request_id!r} needs {need} KV blocks at its longest, but the "
                "pool "
                f"has only {self.pool.num_blocks}: expected a shorter prompt or fewer "
                "max_tokens"
            )

    def add(self, seq: Sequence) -> None:
        self.check(seq)
        self.seen_ids.add(seq.request_id)
        seq.status = "waiting"
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> StepPlan:
        """Plan one step: running requests first, in their order in `running` (the order of
        their (re)admission), then waiting ones first come, first served, within the budgets."""
        budget, chunks, preempted = self.max_num_batched_tokens, [], []
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            left = seq.num_tokens - seq.num_computed  # tokens not in the cache yet
            n = min(left, budget)
            # chapter 9: a decode may carry proposals; a verify takes k + 1 tokens of the budget
            spec = seq.spec_token_ids[: budget - 1] if left == 1 else []
            n += len(spec)
            while not self._reserve(seq, seq.num_computed + n):
                if spec:  # short of blocks: drop the proposals before preempting anyone
                    spec, n = [], 1
                    continue
                # the newest; never one already planned, since those sit before i
                victim = self.running.pop()
                self._preempt(victim)
                preempted.append(victim.request_id)
                if victim is seq:
                    break
            else:
                chunks.append(self._chunk(seq, n, spec))
                budget -= n
                i += 1
        # Admit waiting requests only if nobody was just preempted: they would take the blocks
        # back.
        cache = PrefixCacheStats()
        while (
            not preempted
            and self.waiting
            and budget > 0
            and len(self.running) < self.max_num_seqs
        ):
            seq = self.waiting[0]
            if seq.fork_of is not None:
                hit_blocks, num_hit = self._fork_blocks(seq)
                if hit_blocks is None:
                    # its parent has not computed the shared prompt yet: wait for it, first in
                    # line
                    break
            else:
                # chapter 7's prefix cache; ([], 0) when off
                hit_blocks, num_hit = self.kv.get_computed_blocks(seq)
            n = min(seq.num_tokens - num_hit, budget)
            if not self.kv.allocate_slots(seq, num_hit + n, hit_blocks):
                break  # first come, first served: nobody overtakes the head of the queue
            self.waiting.popleft()
            # the first chunk starts after the cached prefix
            seq.status, seq.num_computed = "running", num_hit
            cache.admit(seq, num_hit)
            self.running.append(seq)
            chunks.append(self._chunk(seq, n))
            budget -= n
        self.num_steps += 1
        cache.num_computed_tokens = sum(c.num_new for c in chunks)
        self.stats.add(cache)
        return StepPlan(self.num_steps, chunks, preempted, cache)

    def update(self, plan: StepPlan, sampled: dict[str, int]) -> list[Sequence]:
        """Record a finished step: advance each chunk, append sampled tokens, retire finished
        requests.

        Only the latest plan, once: applying a plan twice would append its tokens twice and move
        num_computed past the end. Everything is checked before anything changes.
        """
        if plan.step != self.num_steps or plan.step <= self.num_applied:
            state = (
                "was already applied"
                if plan.step <= self.num_applied
                else f"is stale (the latest is step {self.num_steps})"
            )
            raise ValueError(
                f"the plan of step {plan.step} {state}: expected the latest plan from "
                "schedule(), once"
            )
        by_id = {s.request_id: s for s in self.running}
        chunks = [
            c for c in plan.chunks if c.request_id in by_id
        ]  # an aborted request's chunk is dropped
        for c in chunks:
            if c.num_computed != by_id[c.request_id].num_computed:
                raise ValueError(
                    f"request {c.request_id!r} has {by_id[c.request_id].num_computed} "
                    "computed tokens but "
                    f"its chunk starts at {c.num_computed}: expected the plan schedule() just "
                    "made"
                )
            if c.spec_token_ids:
                self._check_verified(c, sampled.get(c.request_id))
            elif c.need_logits and as_int(sampled.get(c.request_id)) is None:
                raise ValueError(
                    f"no sampled token for request {c.request_id!r}, whose chunk needs one "
                    f"(got {sampled.get(c.request_id)!r}: expected an int)"
                )
        self.num_applied = plan.step
        finished = []
        for chunk in chunks:
            seq = by_id[chunk.request_id]
            if chunk.spec_token_ids:
                if self._apply_verified(seq, chunk, sampled[chunk.request_id]):
                    finished.append(seq)
                continue
            seq.num_computed += chunk.num_new
            self.kv.cache_full_blocks(seq)  # blocks now full of computed tokens become findable
            if not chunk.need_logits:
                continue  # a prompt chunk short of the end: nothing to sample yet
            if not seq.append_output(as_int(sampled[chunk.request_id])):
                continue
            self._retire(seq)
            finished.append(seq)
        return finished

    def abort(self, request_id: str) -> Sequence | None:
        """Finish a waiting or running request now (reason "abort"), freeing its blocks; None if
        it is not here.

        With prefix caching, its full computed blocks stay cached (findable) after it is gone.
        """
        for queue in (self.waiting, self.running):
            for seq in queue:
                if seq.request_id == request_id:
                    seq.finish_reason = "abort"
                    self._retire(seq)
                    return seq
        return None

    def _retire(self, seq: Sequence) -> None:
        self.kv.free(seq)
        (self.running if seq.status == "running" else self.waiting).remove(seq)
        seq.status = "finished"

    def _check_verified(self, c: ScheduledChunk, tokens) -> None:
        """A verify's result: 1..k+1 ints whose all but last are the chunk's first proposals."""
        ok = (
            isinstance(tokens, (list, tuple))
            and 1 <= len(tokens) <= len(c.spec_token_ids) + 1
            and all(as_int(t) is not None for t in tokens)
            and list(tokens[:-1]) == list(c.spec_token_ids[: len(tokens) - 1])
        )
        if not ok:
            raise ValueError(
                f"request {c.request_id!r} verified proposals {list(c.spec_token_ids)} but "
                f"got {tokens!r}: "
                "expected a list of the accepted proposals and one more token"
            )

    def _apply_verified(self, seq: Sequence, chunk: ScheduledChunk, tokens: list[int]) -> bool:
        """Append a verify's tokens one by one (a stop token or max_tokens ends the run early),
        roll
        num_computed back to the accepted tokens, free blocks past them. True if seq
        finished."""
        for j, token in enumerate(tokens):  # noqa: B007 (j, the last appended, is read below)
            if seq.append_output(as_int(token)):
                break
        # K/V are right for the last token and the accepted proposals: positions < num_computed
        # + len(appended). The rejected ones' slots are simply overwritten later; with prefix
        # caching nothing past num_computed is filed.
        seq.num_computed = chunk.num_computed + j + 1
        seq.spec_token_ids = []
        self.kv.cache_full_blocks(seq)
        if seq.finish_reason is not None:
            self._retire(seq)
            return True
        keep = num_blocks_for(
            seq.num_tokens, self.block_size
        )  # room for the new last token, nothing more
        if len(seq.block_table) > keep:
            self.pool.free(
                seq.block_table[: keep - 1 : -1]
            )  # blocks holding only rejected proposals' K/V
            del seq.block_table[keep:]
        return False

    def _chunk(self, seq: Sequence, n: int, spec: list[int] = ()) -> ScheduledChunk:
        end = seq.num_computed + n
        if spec:
            return ScheduledChunk(
                seq.request_id, seq.num_computed, n, "verify", True, tuple(spec)
            )
        if seq.output_ids and seq.num_computed == seq.num_tokens - 1:
            kind = "decode"  # only the last sampled token is new
        elif seq.output_ids:
            kind = "recompute"  # preempted earlier: prompt and output tokens go through again
        else:
            kind = "prefill"
        return ScheduledChunk(
            seq.request_id, seq.num_computed, n, kind, need_logits=end == seq.num_tokens
        )

    def _fork_blocks(self, seq: Sequence) -> tuple[list[int] | None, int]:
        """n > 1: the parent's full prompt blocks, shared through their reference counts (None:
        not yet computed).

        Like a prefix-cache hit, only full blocks are shared and at least the last prompt token
        is computed again (its logits give this sequence its own first token); so is a partial
        last block, which each sequence then fills with its own tokens. A parent that finished
        or was aborted shares nothing.
        """
        parent = seq.fork_of
        usable = (len(seq.prompt_ids) - 1) // self.block_size
        if parent.status == "finished" or usable == 0:
            seq.fork_of = None
            return self.kv.get_computed_blocks(seq)
        if parent.status == "waiting" or parent.num_computed < usable * self.block_size:
            return None, 0
        return parent.block_table[:usable], usable * self.block_size

    def _reserve(self, seq: Sequence, num_tokens: int) -> bool:
        """Grow seq's block table to hold num_tokens tokens; False (and no change) if the pool
        is short."""
        return self.kv.allocate_slots(seq, num_tokens)

    def _preempt(self, seq: Sequence) -> None:
        """Free seq's blocks and queue it first in line; it recomputes prompt + output when
        readmitted
        (with prefix caching, only what was evicted from its blocks in the meantime)."""
        self.kv.free(seq)
        seq.num_computed = 0
        seq.spec_token_ids = []
        seq.status = "waiting"
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)
