"""outputs.py — what the engine hands back: a finished request's Output, and one TokenEvent per
new token."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Output:
    """A finished request. Times are in seconds, measured from the moment it was added."""

    request_id: str
    prompt_ids: list[int]
    token_ids: list[int]
    # the decoded tokens ("" when the engine has no tokenizer); a stop token that ended the
    # request (EOS, stop_token_ids) is in token_ids but not in the text, as in vLLM
    text: str
    finish_reason: str  # "length" (max_tokens reached) or "stop" (a stop token or EOS)
    ttft: float  # time to first token
    itl: list[float]  # inter-token latencies: the gaps between consecutive tokens
    num_preemptions: int = 0
    num_cached_tokens: int = (
        0  # prompt tokens found in the prefix cache, never computed (vLLM's name)
    )
    # a spec_decode.SpecDecodeStats: proposals, acceptances, target forwards (chapter 9)
    spec: object = None
    # with SamplingParams.prompt_logprobs / logprobs: per token (logprob, [(id, logprob)] of the
    # top ones); the first prompt token's entry is None (nothing before it scores it)
    prompt_logprobs: list | None = None
    logprobs: list | None = None

    @property
    def latency(self) -> float:
        """Time from submission to the last token."""
        return self.ttft + sum(self.itl)


@dataclass
class TokenEvent:
    """One token produced by one step for one request; `output` is set when that token finished
    it."""

    request_id: str
    token_id: int
    output: Output | None = None
    logprobs: tuple | None = (
        None  # (logprob, [(id, logprob)] top) when the request asked for logprobs
    )
    prompt_logprobs: list | None = (
        None  # on a request's first token, when it asked for prompt_logprobs
    )


@dataclass
class Timing:
    added: float
    token_times: list[float] = field(default_factory=list)
