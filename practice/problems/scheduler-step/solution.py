"""One step of a continuous-batching scheduler: decodes, then started prefills, then new
requests."""

from dataclasses import dataclass


@dataclass
class Request:
    request_id: str
    num_prompt_tokens: int
    num_computed_tokens: int = 0  # tokens whose K/V are cached

    @property
    def is_prefilling(self) -> bool:
        return self.num_computed_tokens < self.num_prompt_tokens


def schedule_step(
    running: list[Request], waiting: list[Request], token_budget: int, max_num_seqs: int
) -> list[tuple[str, int]]:
    """(request_id, num_tokens) for this step; admitted requests move from the front of waiting
    to running."""
    if token_budget < 1 or max_num_seqs < 1:
        raise ValueError(
            f"token_budget={token_budget}, max_num_seqs={max_num_seqs}: expected both >= 1"
        )
    plan, budget = [], token_budget
    for r in running:  # 1. one token for every decode, so streams keep flowing
        if not r.is_prefilling and budget > 0:
            plan.append((r.request_id, 1))
            budget -= 1
    for r in running:  # 2. prompts already started, chunked to what is left
        if r.is_prefilling and budget > 0:
            n = min(r.num_prompt_tokens - r.num_computed_tokens, budget)
            plan.append((r.request_id, n))
            budget -= n
    while waiting and budget > 0 and len(running) < max_num_seqs:  # 3. admit in arrival order
        r = waiting.pop(0)
        running.append(r)
        n = min(r.num_prompt_tokens - r.num_computed_tokens, budget)
        plan.append((r.request_id, n))
        budget -= n
    return plan
