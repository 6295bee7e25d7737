"""structured_output/matcher.py — one request's grammar state, which follows its tokens.

A `RequestGrammar` wraps xgrammar's GrammarMatcher (in xgrammar 0.2.9 an Earley parser over
bytes; the verdicts of context-independent tokens are stored per grammar position at compile
time, the adaptive token mask cache of Dong et al., 2024, arXiv:2411.15100). The rule that
keeps it right through everything the engine does: the matcher has accepted exactly the
request's output tokens, no more, no fewer.
It accepts a token when the scheduler appends it (Sequence.append_output), never when a step is
planned; so a preempted request, which keeps its output tokens and recomputes their K/V, keeps
its matcher as it was, and an aborted one drops it. Speculative proposals enter the matcher
only while their rows' masks are filled, and are rolled back at once.
"""

from __future__ import annotations

import torch


class RequestGrammar:
    def __init__(self, compiled, stop_token_ids: list[int], request_id: str = ""):
        import xgrammar as xgr

        # With no stop token the grammar terminates as soon as it is complete.
        self.matcher = xgr.GrammarMatcher(
            compiled,
            override_stop_tokens=stop_token_ids or None,
            terminate_without_stop_token=not stop_token_ids,
        )
        if self.matcher.is_terminated():  # nothing would mask its first token
            raise ValueError(
                f"request {request_id!r}: its grammar accepts the empty text and the request "
                "has no stop token (ignore_eos without stop_token_ids), so it would end before "
                "its first token: expected a stop token or a grammar that needs a token"
            )
        self.request_id = request_id
        self.num_accepted = 0  # equals len(output_ids) of the request, always
        self.num_refused = 0  # speculative proposals this grammar refused (counted by fill)
        # proposals after a refused one or after the grammar's end: never checked, never used
        self.num_unchecked = 0

    def accept(self, token: int) -> None:
        """Advance past one appended output token; raise if the grammar forbids it (the mask
        should have made that impossible)."""
        if not self.matcher.accept_token(int(token)):
            raise RuntimeError(
                f"request {self.request_id!r}: token {token} is not allowed by its grammar "
                f"after {self.num_accepted} tokens: expected the bitmask to have excluded it"
            )
        self.num_accepted += 1

    @property
    def is_terminated(self) -> bool:
        """The grammar reached its end (and accepted a stop token, if it has any)."""
        return self.matcher.is_terminated()

    def fill(self, bitmask: torch.Tensor, row: int, proposals=()) -> int:
        """Fill bitmask rows row, row+1, ... for the next token and, for a verify, the token
        after each proposal; returns how many rows hold a mask.

        Filling stops at the first proposal the grammar refuses: its row forbids it, so the
        verification rejects it, and the rows after it are never used. The proposals are
        rolled back before returning: the matcher still follows the output tokens only.
        """
        self.matcher.fill_next_token_bitmask(bitmask, row)
        accepted = 0
        for t in proposals:
            if not self.matcher.accept_token(int(t)):
                self.num_refused += 1  # at most one per verify: filling stops here
                self.num_unchecked += len(proposals) - accepted - 1
                break
            accepted += 1
            if self.matcher.is_terminated():  # a stop token: the request ends there
                self.num_unchecked += len(proposals) - accepted
                break
            self.matcher.fill_next_token_bitmask(bitmask, row + accepted)
        filled = accepted + 1 if not self.matcher.is_terminated() else accepted
        if accepted:
            self.matcher.rollback(accepted)
        return filled
