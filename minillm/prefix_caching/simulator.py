"""prefix_caching/simulator.py — the same traffic through a block-hash prefix cache (vLLM) and a
radix tree (SGLang).

`make_traffic` draws synthetic traffic (random token ids, hand-picked lengths) in a seeded mix
of three kinds: chats that share one system prompt and come back turn after turn (each turn's
prompt is the whole conversation so far), few-shot prompts that start with one of a few long
headers, and unrelated one-off prompts. Each request's answer is drawn in advance, so both
caches see exactly the same tokens.

The simulation serves requests one after another, with no model: the block side runs the
engine's own `KVCacheManager` (real lookups, real LRU eviction over a pool of `capacity_tokens
// block_size` blocks); the radix side runs `RadixCache` with the same token capacity. Both
leave the last prompt token to compute. What comes out: hit tokens per request, the hit rate,
and what each cache holds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from minillm.checking import check_int
from minillm.paged import BlockPool, num_blocks_for
from minillm.prefix_caching.kv_cache_manager import KVCacheManager
from minillm.prefix_caching.radix_cache import RadixCache
from minillm.sampling import SamplingParams
from minillm.scheduler import Sequence


@dataclass
class SimRequest:
    kind: str  # "chat", "few-shot" or "unrelated"
    prompt: list[int]
    output: list[int]  # its answer; the next turn of a chat starts with prompt + output

    @property
    def kv_tokens(self) -> list[int]:
        """The tokens whose K/V a finished request leaves behind: all but the last sampled
        one."""
        return (self.prompt + self.output)[:-1]


def make_traffic(
    num_requests: int = 300,
    seed: int = 0,
    vocab_size: int = 32_000,
    system_len: int = 300,
    num_headers: int = 3,
    mix: tuple[float, float, float, float] = (0.12, 0.38, 0.3, 0.2),
) -> list[SimRequest]:
    """A seeded request stream. mix: chances of (a new chat, the next turn of an open chat,
    few-shot, unrelated).

    Lengths in tokens: system prompt `system_len`; user turns 10-80; answers 20-200 (chats),
    5-40 (few-shot); few-shot headers 200-500, questions 10-40; unrelated prompts 20-400. A chat
    closes after 2-6 turns.
    """
    num_requests = check_int("num_requests", num_requests, min=1)
    rng = random.Random(seed)
    words = lambda lo, hi: [rng.randrange(vocab_size) for _ in range(rng.randint(lo, hi))]  # noqa: E731
    system = words(system_len, system_len)
    headers = [words(200, 500) for _ in range(num_headers)]
    chats: list[dict] = []  # open conversations: {"history": tokens so far, "turns_left": n}
    traffic = []
    while len(traffic) < num_requests:
        kind = rng.choices(["new-chat", "next-turn", "few-shot", "unrelated"], weights=mix)[0]
        if kind == "next-turn" and not chats:
            kind = "new-chat"
        if kind in ("new-chat", "next-turn"):
            chat = (
                {"history": list(system), "turns_left": rng.randint(2, 6)}
                if kind == "new-chat"
                else rng.choice(chats)
            )
            if kind == "new-chat":
                chats.append(chat)
            prompt = chat["history"] + words(10, 80)
            req = SimRequest("chat", prompt, words(20, 200))
            chat["history"] = prompt + req.output
            chat["turns_left"] -= 1
            if chat["turns_left"] == 0:
                chats.remove(chat)
        elif kind == "few-shot":
            req = SimRequest("few-shot", rng.choice(headers) + words(10, 40), words(5, 40))
        else:
            req = SimRequest("unrelated", words(20, 400), words(20, 200))
        traffic.append(req)
    return traffic


@dataclass
class SimResult:
    hits: list[int] = field(default_factory=list)  # cached prompt tokens, per request
    prompt_tokens: int = 0
    # tokens of K/V the cache holds at the end (blocks: filed blocks x block_size)
    held_tokens: int = 0
    index_entries: int = 0  # filed blocks, or tree nodes
    # batch per request (simulate_scheduling)
    served_in: list[int] = field(default_factory=list)

    @property
    def hit_rate(self) -> float:
        return sum(self.hits) / self.prompt_tokens if self.prompt_tokens else 0.0


def unbounded(traffic: list[SimRequest]) -> int:
    """A token capacity large enough that nothing is ever evicted."""
    return sum(len(r.kv_tokens) + 256 for r in traffic)


def simulate_blocks(
    traffic: list[SimRequest], block_size: int, capacity_tokens: int | None = None
) -> SimResult:
    """Serve the traffic in order through a KVCacheManager with prefix caching on."""
    block_size = check_int("block_size", block_size, min=1)
    capacity = (
        unbounded(traffic)
        if capacity_tokens is None
        else check_int("capacity_tokens", capacity_tokens, min=1)
    )
    manager = KVCacheManager(
        BlockPool(max(1, capacity // block_size)), block_size, enable_caching=True
    )
    result = SimResult()
    for i, r in enumerate(traffic):
        seq = Sequence(f"sim-{i}", list(r.prompt), SamplingParams(max_tokens=len(r.output)))
        blocks, hit = manager.get_computed_blocks(seq)
        if not manager.allocate_slots(seq, len(r.kv_tokens), blocks):
            raise ValueError(
                f"request {i} needs {num_blocks_for(len(r.kv_tokens), block_size)} blocks of "
                f"{block_size} tokens: expected capacity_tokens of at least that, got "
                f"{capacity}"
            )
        # as if it ran to the end
        seq.output_ids, seq.num_computed = list(r.output), len(r.kv_tokens)
        manager.cache_full_blocks(seq)
        manager.free(seq)
        result.hits.append(hit)
        result.prompt_tokens += len(r.prompt)
    result.index_entries = manager.num_cached_blocks
    result.held_tokens = result.index_entries * block_size
    return result


def simulate_radix(traffic: list[SimRequest], capacity_tokens: int | None = None) -> SimResult:
    """Serve the traffic in order through a RadixCache holding at most capacity_tokens
    tokens."""
    capacity = (
        unbounded(traffic)
        if capacity_tokens is None
        else check_int("capacity_tokens", capacity_tokens, min=1)
    )
    tree, result = RadixCache(), SimResult()
    for i, r in enumerate(traffic):
        # at least the last prompt token is computed
        hit, node = tree.match_prefix(r.prompt[:-1])
        tree.inc_lock_ref(node)  # its prefix must survive while it runs
        new = len(r.kv_tokens) - hit  # K/V it writes, held outside the tree until it finishes
        tree.evict(max(0, tree.total_size + new - capacity))
        if tree.total_size + new > capacity:
            raise ValueError(
                f"request {i} needs {new} tokens of K/V beyond its cached prefix: expected "
                f"capacity_tokens of at least {tree.protected_size + new}, got {capacity}"
            )
        tree.dec_lock_ref(node)
        tree.insert(r.kv_tokens)
        result.hits.append(hit)
        result.prompt_tokens += len(r.prompt)
    result.held_tokens, result.index_entries = tree.total_size, tree.num_nodes()
    return result


def _follows(later: SimRequest, earlier: SimRequest) -> bool:
    """Whether `later` is a next turn of `earlier`'s chat (it resends earlier's prompt and
    answer), so it cannot have been sent before earlier was answered."""
    done = earlier.prompt + earlier.output
    return len(later.prompt) > len(done) and later.prompt[: len(done)] == done


def simulate_scheduling(
    traffic: list[SimRequest],
    block_size: int,
    capacity_tokens: int,
    window: int,
    policy: str = "fcfs",
) -> SimResult:
    """Serve the traffic through a KVCacheManager in consecutive batches of `window` requests.

    Each batch is served to its last request, one request at a time (each finishes before the
    next starts), before the next batch arrives. A chat's next turn cannot be sent before the
    turn it follows is answered, so one whose earlier turn is in the same batch is held back
    and joins the next batch. policy "fcfs" serves a batch in arrival order; "lpm" (SGLang's
    longest prefix match) serves next the request of the batch with the longest cached prefix
    now. Hits, and the batch each request was served in, are reported per request in arrival
    order.
    """
    if policy not in ("fcfs", "lpm"):
        raise ValueError(f"policy is {policy!r}: expected 'fcfs' or 'lpm'")
    block_size = check_int("block_size", block_size, min=1)
    capacity = check_int("capacity_tokens", capacity_tokens, min=1)
    window = check_int("window", window, min=1)
    manager = KVCacheManager(
        BlockPool(max(1, capacity // block_size)), block_size, enable_caching=True
    )
    hits, served_in = [0] * len(traffic), [0] * len(traffic)
    held: list[int] = []  # next turns whose earlier turn was served in the batch before
    batch, start = 0, 0
    while start < len(traffic) or held:
        arrived = held + list(range(start, min(start + window, len(traffic))))
        start += window
        # a next turn exists only once the turn it follows is answered: not in the same batch
        held = [i for i in arrived if any(_follows(traffic[i], traffic[j]) for j in arrived)]
        waiting = [i for i in arrived if i not in held]
        while waiting:
            if policy == "lpm":
                usable = lambda i: traffic[i].prompt[:-1]  # noqa: E731 - the last token runs
                pick = max(waiting, key=lambda i: len(manager.lookup(usable(i))))
            else:
                pick = waiting[0]
            waiting.remove(pick)
            served_in[pick] = batch
            r = traffic[pick]
            seq = Sequence(f"sim-{pick}", list(r.prompt), SamplingParams())
            blocks, hits[pick] = manager.get_computed_blocks(seq)
            if not manager.allocate_slots(seq, len(r.kv_tokens), blocks):
                raise ValueError(
                    f"request {pick} needs {num_blocks_for(len(r.kv_tokens), block_size)} "
                    f"blocks of {block_size} tokens: expected capacity_tokens of at least "
                    f"that, got {capacity}"
                )
            seq.output_ids, seq.num_computed = list(r.output), len(r.kv_tokens)
            manager.cache_full_blocks(seq)
            manager.free(seq)
        batch += 1
    return SimResult(
        hits=hits,
        served_in=served_in,
        prompt_tokens=sum(len(r.prompt) for r in traffic),
        index_entries=manager.num_cached_blocks,
        held_tokens=manager.num_cached_blocks * block_size,
    )
