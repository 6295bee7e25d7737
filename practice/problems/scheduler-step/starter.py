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
    raise NotImplementedError("schedule_step")
