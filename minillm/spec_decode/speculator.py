"""spec_decode/speculator.py — speculative decoding: propose k tokens cheaply, verify them in
one target forward.

    engine = LLMEngine(path, speculative_config={"method": "ngram", "num_speculative_tokens":
    4})

Before each step, every running request that is decoding gets up to k proposed tokens from a
proposer. The scheduler then plans that request's chunk as its last token plus the k proposals
(k+1 query tokens, budgeted like any other chunk), the one mixed forward computes the target's
logits at all k+1 positions, and spec_decode/rejection_sampler.py keeps the longest acceptable
prefix plus one token of the target's own. The K/V written for rejected proposals stay where
they are, but `num_computed` is rolled back past them (and blocks holding nothing but them are
freed), so the next step overwrites them: they are never read, and never filed in the prefix
cache, which only files blocks full of computed tokens.

Proposers share one interface, `propose(seqs, ks) -> [(tokens, q)]`, and `forget(request_id)`:
- `NgramProposer`: prompt lookup, as vLLM's NgramProposer: no model, no probabilities (q =
  None).
- `DraftModelProposer`: a smaller model with its own PagedKVCache of the same block_size and
  num_blocks, so that the target's block tables and slot mapping index it too: the draft writes
  its K/V into the same block ids in its own tensors. `truncated_draft` makes the book's default
  draft from the target's first layers (same weights, shared, no copy); the target itself as its
  own draft is the upper bound: every greedy proposal is accepted.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch
from torch import nn

from minillm.checking import check_int
from minillm.model import Transformer
from minillm.paged import PagedKVCache
from minillm.runner import ModelRunner, build_batch
from minillm.sampling import sample, step_seed
from minillm.spec_decode.rejection_sampler import target_probs, verify

METHODS = ("ngram", "draft_model")
CONFIG_KEYS = {
    "method",
    "num_speculative_tokens",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "model",
    "num_draft_layers",
    "disable_by_batch_size",
}
DRAFT = 0x5EC3  # the purpose mixed into a request's seed for the draft's own draws


# ---- the n-gram proposer
#   ----------------------------------------------------------------------------
def ngram_propose(
    context: list[int], k: int, prompt_lookup_min: int, prompt_lookup_max: int
) -> list[int]:
    """Up to k tokens that followed an earlier occurrence of the context's longest suffix of
    prompt_lookup_min..prompt_lookup_max tokens; [] when no such suffix occurred before.

    Longer suffixes are tried first (a longer match predicts better); among a suffix's earlier
    occurrences the earliest wins, as in transformers' prompt lookup (vLLM 0.34.0's GPU kernel
    takes the latest and pads to k; chapter 9 shows both). The earliest has the most tokens
    after it, so a proposal is seldom cut short by the end of the context (for the suffix [7] of
    [7, 7, 7, 7], the latest earlier [7] is followed by one token, the earliest by three).
    """
    n_ctx = len(context)
    for n in range(min(prompt_lookup_max, n_ctx - 1), prompt_lookup_min - 1, -1):
        suffix = context[n_ctx - n :]
        for start in range(n_ctx - n):  # every start before the suffix's own, earliest first
            if context[start : start + n] == suffix:
                return context[start + n : start + n + k]
    return []


class NgramProposer:
    writes_kv = False  # proposals cost no forward and need no cache slots before the verify

    def __init__(self, prompt_lookup_min: int, prompt_lookup_max: int):
        self.prompt_lookup_min, self.prompt_lookup_max = prompt_lookup_min, prompt_lookup_max

    def propose(self, seqs, ks: list[int]) -> list[tuple[list[int], None]]:
        return [
            (
                ngram_propose(
                    s.tokens(0, s.num_tokens), k, self.prompt_lookup_min, self.prompt_lookup_max
                ),
                None,
            )
            for s, k in zip(seqs, ks)
        ]

    def forget(self, request_id: str) -> None:
        pass  # no per-request state


# ---- the draft-model proposer
#   -----------------------------------------------------------------------
def truncated_draft(target: Transformer, num_layers: int) -> Transformer:
    """A draft that is the target's first num_layers layers, embedding, final norm and head:
    shared, not copied."""
    num_layers = check_int(
        "num_draft_layers", num_layers, min=1, max=target.cfg.num_hidden_layers
    )
    with torch.device("meta"):  # the new modules are replaced below; allocate nothing for them
        draft = Transformer(dataclasses.replace(target.cfg, num_hidden_layers=num_layers))
    draft.embed_tokens, draft.norm, draft.lm_head = (
        target.embed_tokens,
        target.norm,
        target.lm_head,
    )
    draft.layers = nn.ModuleList(
        target.layers[:num_layers]
    )  # layer i keeps index i: the draft cache's layer i
    return draft.eval()


class DraftModelProposer:
    """k greedy (or sampled) steps of a draft model over the same block tables as the target."""

    writes_kv = True  # the draft's forwards write K/V: slots are reserved before it runs

    def __init__(self, draft: Transformer, num_blocks: int, block_size: int):
        self.draft, self.block_size = draft, block_size
        self.kv = PagedKVCache.for_model(
            draft, num_blocks, block_size
        )  # same ids, its own tensors
        self.runner = ModelRunner(draft, self.kv)
        self.computed: dict[str, int] = {}  # request -> positions whose draft K/V were written

    def forget(self, request_id: str) -> None:
        """The request was preempted or finished: its blocks are gone, and so are its
        draft K/V."""
        self.computed.pop(request_id, None)

    def _pick(
        self, logits: torch.Tensor, seqs, steps: list[int]
    ) -> tuple[list[int], list[torch.Tensor | None]]:
        """The draft's token per row: argmax for greedy requests, else a seeded draw from q
        (returned too)."""
        tokens = sample(logits, [s.params for s in seqs], [s.seed ^ DRAFT for s in seqs], steps)
        qs = [
            None if s.params.greedy else target_probs(logits[i : i + 1], s.params)[0].cpu()
            for i, s in enumerate(seqs)
        ]
        return tokens, qs

    @torch.no_grad()
    def propose(self, seqs, ks: list[int]):
        """seqs' block tables must already hold num_tokens + k - 1 positions (the engine
        reserves them)."""
        out = [([], []) for _ in seqs]
        # Round 0 catches each request up (the tokens the target accepted since its last round,
        # or its whole context after a preemption) and proposes the first token; each later
        # round feeds one draft token.
        start = [min(self.computed.get(s.request_id, 0), s.num_computed) for s in seqs]
        items = [
            (s.tokens(a, s.num_tokens), a, s.block_table, True) for s, a in zip(seqs, start)
        ]
        pos = [s.num_tokens for s in seqs]  # the position of the next token each request feeds
        active = list(range(len(seqs)))
        for j in range(max(ks, default=0)):
            if j > 0:
                active = [i for i in active if ks[i] > j]
                if not active:
                    break
                items = [
                    ([out[i][0][-1]], pos[i] - 1, seqs[i].block_table, True) for i in active
                ]
            logits = self.runner.forward(
                build_batch(items, self.block_size)
            )  # [len(active), V]
            picked = [seqs[i] for i in active]
            tokens, qs = self._pick(logits, picked, [len(s.output_ids) + j for s in picked])
            for i, t, q in zip(active, tokens, qs):
                out[i][0].append(t)
                out[i][1].append(q)
                pos[i] += 1
        for i, s in enumerate(seqs):
            self.computed[s.request_id] = (
                pos[i] - 1
            )  # the last proposal was never fed, so it has no K/V
        return [
            (toks, None if not qs or qs[0] is None else torch.stack(qs)) for toks, qs in out
        ]


# ---- metrics
#   ----------------------------------------------------------------------------------------
@dataclass
class SpecDecodeStats:
    """Counts for one request or for the whole engine (vLLM's spec-decode metric names)."""

    num_drafts: int = 0  # verifies run
    num_draft_tokens: int = 0  # tokens proposed
    num_accepted_tokens: int = 0  # proposals the target accepted
    num_output_tokens: int = (
        0  # tokens produced (accepted proposals, bonus tokens, ordinary samples)
    )
    num_forwards: int = (
        0  # target forwards that produced tokens (per request) or that ran (engine total)
    )

    @property
    def acceptance_rate(self) -> float:
        return (
            self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0
        )

    @property
    def mean_accepted_length(self) -> float:
        """Tokens per verify, the bonus included (1 + accepted per draft): vLLM's mean
        acceptance length."""
        return 1 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 0.0

    @property
    def forwards_per_token(self) -> float:
        """Target forwards per output token: 1.0 for plain decoding, lower when proposals are
        accepted."""
        return self.num_forwards / self.num_output_tokens if self.num_output_tokens else 0.0


def count_step(
    total: SpecDecodeStats, per_request: dict, plan, sampling, before: dict, sampled: dict
) -> None:
    """Add one step to the engine's totals and to each request's stats: a target forward for
    every
    request that got tokens, the tokens it kept (before: its output count before the step),
    and for each verify its proposals and how many the target accepted."""
    total.num_forwards += 1
    for s in sampling:
        n = len(s.output_ids) - before[s.request_id]
        st = per_request[s.request_id]
        st.num_forwards += 1
        st.num_output_tokens += n
        total.num_output_tokens += n
    for c in plan.chunks:
        if c.spec_token_ids and c.request_id in per_request:
            for st in (total, per_request[c.request_id]):
                st.num_drafts += 1
                st.num_draft_tokens += len(c.spec_token_ids)
                st.num_accepted_tokens += len(sampled[c.request_id]) - 1


# ---- configuration and the engine's two calls
#   -------------------------------------------------------
def check_config(config, target: Transformer) -> dict:
    """speculative_config checked (vLLM's key names); returns it with defaults filled in."""
    if not isinstance(config, dict):
        raise ValueError(
            f"speculative_config is {config!r}: expected a dict such as "
            '{"method": "ngram", "num_speculative_tokens": 4}'
        )
    unknown = sorted(set(config) - CONFIG_KEYS)
    if unknown:
        raise ValueError(
            f"speculative_config has unknown keys {unknown}: expected some of "
            f"{sorted(CONFIG_KEYS)}"
        )
    method = config.get("method")
    if method not in METHODS:
        raise ValueError(
            f"speculative_config method is {method!r}: expected one of {list(METHODS)}"
        )
    if "num_speculative_tokens" not in config:
        raise ValueError(
            "speculative_config lacks num_speculative_tokens: expected an int >= 1 (k, the "
            "proposals per step)"
        )
    c = dict(config)
    c["num_speculative_tokens"] = check_int(
        "num_speculative_tokens", config["num_speculative_tokens"], min=1
    )
    c["disable_by_batch_size"] = (
        None
        if c.get("disable_by_batch_size") is None
        else check_int("disable_by_batch_size", c["disable_by_batch_size"], min=1)
    )
    wrong = sorted(
        set(c)
        & (
            {"model", "num_draft_layers"}
            if method == "ngram"
            else {"prompt_lookup_min", "prompt_lookup_max"}
        )
    )
    if wrong:
        raise ValueError(f"speculative_config keys {wrong} do not apply to method {method!r}")
    if method == "ngram":
        lo = check_int("prompt_lookup_min", c.get("prompt_lookup_min", 1), min=1)
        hi = check_int("prompt_lookup_max", c.get("prompt_lookup_max", max(lo, 3)), min=1)
        if hi < lo:
            raise ValueError(f"prompt_lookup_max is {hi}: expected >= prompt_lookup_min ({lo})")
        c["prompt_lookup_min"], c["prompt_lookup_max"] = lo, hi
        return c
    model = c.get("model")
    if model is not None and "num_draft_layers" in c:
        raise ValueError(
            "speculative_config has both model and num_draft_layers: expected one "
            "(num_draft_layers "
            "builds the draft from the target's own first layers)"
        )
    if model is None:
        c["num_draft_layers"] = check_int(
            "num_draft_layers",
            c.get("num_draft_layers", max(1, target.cfg.num_hidden_layers // 2)),
            min=1,
            max=target.cfg.num_hidden_layers,
        )
    elif isinstance(model, (str, os.PathLike)):
        w = target.embed_tokens.weight
        c["model"] = model = Transformer.from_pretrained(model, dtype=w.dtype, device=w.device)
    if model is not None:
        if not isinstance(model, Transformer):
            raise ValueError(
                f"speculative_config model is {model!r}: expected a Transformer, a checkpoint "
                "folder or None"
            )
        if model.cfg.vocab_size != target.cfg.vocab_size:
            raise ValueError(
                f"the draft model's vocabulary has {model.cfg.vocab_size} tokens, the target's "
                f"{target.cfg.vocab_size}: expected a draft that shares the target's tokenizer"
            )
    return c


class SpeculativeDecoder:
    """What the engine adds for speculation: proposals before a step, verification after its
    forward."""

    def __init__(self, config, target: Transformer, num_blocks: int, block_size: int):
        c = check_config(config, target)
        self.config, self.k, self.disable_by_batch_size = (
            c,
            c["num_speculative_tokens"],
            c["disable_by_batch_size"],
        )
        if c["method"] == "ngram":
            self.proposer = NgramProposer(c["prompt_lookup_min"], c["prompt_lookup_max"])
        else:
            draft = (
                c["model"]
                if c.get("model") is not None
                else truncated_draft(target, c["num_draft_layers"])
            )
            self.proposer = DraftModelProposer(draft, num_blocks, block_size)
        self.q: dict[
            str, torch.Tensor | None
        ] = {}  # this step's draft distributions, per request

    def propose(self, scheduler) -> None:
        """Set spec_token_ids of every running request that is decoding (the others get
        none)."""
        self.q = {}
        running = scheduler.running
        for seq in running:
            seq.spec_token_ids = []
        if (
            self.disable_by_batch_size is not None
            and len(running) >= self.disable_by_batch_size
        ):
            # a full batch has no spare compute to verify with: with that many requests or
            # more, nobody proposes (vLLM's V0 speculative_disable_by_batch_size; its V1
            # engine instead picks k by batch size, num_speculative_tokens_per_batch_size)
            return
        seqs, ks = [], []
        for seq in running:
            k = min(
                self.k, seq.params.max_tokens - len(seq.output_ids) - 1
            )  # never propose past max_tokens
            if seq.output_ids and seq.num_computed == seq.num_tokens - 1 and k > 0:
                # The draft writes K/V for its proposals, so their slots must exist now; if the
                # pool is short, this request just decodes (reserve num_tokens + k: what the
                # verify will need anyway).
                if not self.proposer.writes_kv or scheduler.kv.allocate_slots(
                    seq, seq.num_tokens + k
                ):
                    seqs.append(seq)
                    ks.append(k)
        for seq, (tokens, q) in zip(seqs, self.proposer.propose(seqs, ks)):
            seq.spec_token_ids, self.q[seq.request_id] = list(tokens), q

    def sample(self, logits: torch.Tensor, chunks, seqs: dict) -> dict[str, int | list[int]]:
        """logits [M, V] with chunk.num_logits rows per chunk that needs them: an int per plain
        request,
        the emitted tokens (accepted proposals + one) per verifying request."""
        out, plain, row = {}, [], 0
        for c in chunks:
            n = c.num_logits
            seq = seqs[c.request_id]
            if c.spec_token_ids:
                q = self.q.get(c.request_id)
                q = (
                    None if q is None else q[: len(c.spec_token_ids)]
                )  # the scheduler may have trimmed the proposals
                out[c.request_id] = verify(
                    logits[row : row + n],
                    list(c.spec_token_ids),
                    q,
                    seq.params,
                    seq.seed,
                    len(seq.output_ids),
                )
            elif n:
                plain.append((row, seq))
            row += n
        if plain:
            rows = [r for r, _ in plain]
            ss = [s for _, s in plain]
            for s, t in zip(
                ss,
                sample(
                    logits[rows],
                    [s.params for s in ss],
                    [s.seed for s in ss],
                    [len(s.output_ids) for s in ss],
                ),
            ):
                out[s.request_id] = t
        return out


__all__ = [
    "NgramProposer",
    "DraftModelProposer",
    "SpeculativeDecoder",
    "SpecDecodeStats",
    "ngram_propose",
    "truncated_draft",
    "check_config",
    "count_step",
    "step_seed",
]
