"""structured_output/bitmask.py — the interface between a grammar and the sampler.

A grammar's answer for one row of logits is a set of allowed tokens, packed as bits: token t is
bit t % 32 of int32 word t // 32 (least significant bit first), 1 meaning allowed. A row of a
151,936-token vocabulary is 4,748 words (19 KB) instead of 151,936 booleans. Applying it sets
every forbidden token's logit to -inf before anything else in the sampler runs, so greedy,
temperature, top-k, top-p and the speculative verification all see only allowed tokens; rows of
requests without a grammar are left exactly as they were.
"""

from __future__ import annotations

import torch

WORD_BITS = 32


def words_for(vocab_size: int) -> int:
    return (vocab_size + WORD_BITS - 1) // WORD_BITS


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """bitmask [M, W] int32 as booleans [M, vocab_size], True where the token is allowed."""
    shifts = torch.arange(WORD_BITS, dtype=torch.int32, device=bitmask.device)  # [32]
    bits = (bitmask[:, :, None] >> shifts) & 1  # [M, W, 32]: bit j of word i is token 32i + j
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab_size].bool()


def pack_bitmask(allowed: torch.Tensor) -> torch.Tensor:
    """allowed [M, V] booleans as a packed bitmask [M, W] int32, the inverse of unpack_bitmask;
    the padding bits past V are 0 (forbidden)."""
    m, v = allowed.shape
    bits = torch.zeros(m, words_for(v) * WORD_BITS, dtype=torch.int64, device=allowed.device)
    bits[:, :v] = allowed
    shifts = torch.arange(WORD_BITS, dtype=torch.int64, device=allowed.device)  # [32]
    words = (bits.view(m, -1, WORD_BITS) << shifts).sum(-1)  # [M, W], 0 to 2**32 - 1
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)  # bit 31: sign


# On CPU logits, xgrammar's torch backend: replayed on the mask rows of chapter 12's own runs,
# most of which allow under 1% of the vocabulary, it takes less time in total than xgrammar's
# C++ CPU kernel; inside engine steps the two are close (chapter 12, sections 7 and 8).
# On a GPU, "auto" lets xgrammar pick its device kernel.
CPU_BACKEND = "torch_native"


def backend_for(device: torch.device) -> str:
    """The xgrammar apply backend for logits on this device."""
    return CPU_BACKEND if device.type == "cpu" else "auto"


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """logits [M, V] with the forbidden tokens of the given rows set to -inf (in place).

    bitmask [M, W] holds one packed row per row of logits; only `rows` are applied, by xgrammar
    (the backend_for the logits' device), on float32 logits.
    """
    import xgrammar as xgr

    if not rows:
        return logits
    # the kernel wants float32 (-inf survives the cast back); float32 logits are masked in place
    out = logits if logits.dtype == torch.float32 else logits.float()
    xgr.apply_token_bitmask_inplace(
        out,
        bitmask.to(out.device),
        vocab_size=out.shape[-1],
        indices=rows,
        backend=backend_for(out.device),
    )
    return out if out is logits else out.to(logits.dtype)


def mask_plan(chunks, seqs: dict) -> list[tuple]:
    """(grammar, first row, proposals) for each chunk of a constrained request that needs
    logits; rows counted in plan order, chunk.num_logits rows per chunk."""
    plan, row = [], 0
    for c in chunks:
        grammar = seqs[c.request_id].grammar
        if c.num_logits and grammar is not None:
            plan.append((grammar, row, c.spec_token_ids))
        row += c.num_logits
    return plan


def fill_plan(bitmask: torch.Tensor, plan: list[tuple]) -> list[int]:
    """Fill the rows of every planned request; returns the rows that hold a mask."""
    rows = []
    for grammar, start, proposals in plan:
        filled = grammar.fill(bitmask, start, proposals)
        rows += range(start, start + filled)
    return rows


def constrain_logits(logits: torch.Tensor, chunks, seqs: dict) -> torch.Tensor:
    """The step's logits [M, V] (chunk.num_logits rows per chunk, in plan order) masked by the
    grammar of every request that has one; the other rows untouched."""
    import xgrammar as xgr

    plan = mask_plan(chunks, seqs)
    if not plan:
        return logits
    bitmask = xgr.allocate_token_bitmask(*logits.shape)  # [M, W], all allowed
    return apply_bitmask(logits, bitmask, fill_plan(bitmask, plan))
