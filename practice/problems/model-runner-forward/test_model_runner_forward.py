"""Tests for PagedBackend and runner_forward: mixed steps through minillm's model against each
request's single-sequence logits, the cache's contents against minillm's own ModelRunner, the
model call, the cache writes and the output layer counted, and attend read as code: one
attention over the step, no loop over requests, no minillm."""

import ast
import random

import pytest
import torch
from grading import check_close, check_equal, defined_in, fail, share
from judge_plugin import source_under_test

from minillm.paged import PagedKVCache, paged_attention
from minillm.runner import ModelRunner, build_batch

BLOCK = 4
TABLES = [[3, 0], [5, 1], [2, 7, 4, 6, 8, 9]]


@pytest.fixture
def prompts():
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 512, (n,), generator=g).tolist() for n in (7, 5, 22)]


def new_cache(model, block_size=BLOCK, num_blocks=16):
    return share(PagedKVCache.for_model(model, num_blocks, block_size), methods=["write"])


def alone(model, ids):
    return model(torch.tensor([ids]))[0, -1]


def step1(prompts, block_size=BLOCK):
    a, b, c = prompts
    return build_batch(
        [(a, 0, TABLES[0], True), (b, 0, TABLES[1], True), (c[:10], 0, TABLES[2], False)],
        block_size,
    )


class Recorder:
    """The model, with a note of every call: tokens, positions, backend, logits_indices."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def __call__(self, input_ids, positions=None, attn=None, logits_indices=None):
        self.calls.append(
            {
                "tokens": int(input_ids.shape[-1]),
                "positions": None if positions is None else positions.tolist(),
                "attn": attn,
                "logits_indices": None
                if logits_indices is None
                else torch.as_tensor(logits_indices).tolist(),
            }
        )
        return self.model(input_ids, positions, attn, logits_indices)

    def __getattr__(self, name):
        return getattr(self.model, name)


class CountingCache:
    """The paged cache, with a note of every write (layer, number of slots)."""

    def __init__(self, kv):
        self.kv, self.writes = kv, []

    def write(self, layer, slot_mapping, k, v):
        self.writes.append((int(layer), len(slot_mapping)))
        return self.kv.write(layer, slot_mapping, k, v)

    def __getattr__(self, name):
        return getattr(self.kv, name)


def test_prefill_logits_match_single_sequence_reference(tiny_model, learner, prompts):
    """Each prompt's last-token logits equal the model's on that prompt alone."""
    logits = learner.runner_forward(tiny_model, new_cache(tiny_model), step1(prompts))
    check_equal(
        tuple(logits.shape),
        (2, 512),
        "the shape of step 1's logits (two requests sample, one does not)",
    )
    for row, name in [(0, "A"), (1, "B")]:
        check_close(
            logits[row],
            alone(tiny_model, prompts[row]),
            f"the logits of prefill {name}",
            atol=1e-4,
        )


def test_mixed_step_matches_single_sequence_reference(tiny_model, learner, prompts):
    """Decode, decode and a prompt chunk in one forward: each row equals its request run
    alone."""
    a, b, c = prompts
    kv = new_cache(tiny_model)
    first = learner.runner_forward(tiny_model, kv, step1(prompts))
    na, nb = first.argmax(-1).tolist()
    step2 = build_batch(
        [([na], 7, TABLES[0], True), ([nb], 5, TABLES[1], True), (c[10:], 10, TABLES[2], True)],
        BLOCK,
    )
    logits = learner.runner_forward(tiny_model, kv, step2)
    check_equal(tuple(logits.shape), (3, 512), "the shape of step 2's logits")
    for row, ids, name in [
        (0, a + [na], "A's decode"),
        (1, b + [nb], "B's decode"),
        (2, c, "C's chunk 10..21"),
    ]:
        check_close(logits[row], alone(tiny_model, ids), f"the logits of {name}", atol=1e-4)


def test_writes_kv_for_every_new_token(tiny_model, learner, prompts):
    """After a step the cache holds the K/V of all N new tokens, also of the chunk that samples
    nothing."""
    mine, ref = new_cache(tiny_model), PagedKVCache.for_model(tiny_model, 16, BLOCK)
    learner.runner_forward(tiny_model, mine, step1(prompts))
    ModelRunner(tiny_model, ref).forward(step1(prompts))
    for layer in range(tiny_model.cfg.num_hidden_layers):
        check_close(
            mine.k[layer],
            ref.k[layer],
            f"the cached keys of layer {layer} after step 1",
            atol=1e-5,
        )
        check_close(
            mine.v[layer],
            ref.v[layer],
            f"the cached values of layer {layer} after step 1",
            atol=1e-5,
        )


def test_one_model_call_with_positions_backend_and_logits_rows(tiny_model, learner, prompts):
    """One call of the model per step, with batch.positions, your PagedBackend and
    batch.logits_indices."""
    model, batch = share(Recorder(tiny_model), call=True), step1(prompts)
    learner.runner_forward(model, new_cache(tiny_model), batch)
    if len(model.calls) != 1:
        fail(
            f"runner_forward called the model {len(model.calls)} times for one step: expected "
            "once, for all 22 tokens"
        )
    call = model.calls[0]
    check_equal(
        [call["tokens"], call["positions"], call["logits_indices"]],
        [22, batch.positions.tolist(), batch.logits_indices.tolist()],
        "[tokens, positions, logits_indices] of the model call",
    )
    if call["attn"] is None:
        fail(
            "runner_forward called the model without a backend: pass your PagedBackend as attn"
        )
    check_equal(
        defined_in(call["attn"]),
        defined_in(learner.PagedBackend),
        "the class of the backend passed to the model",
    )


def test_output_layer_runs_only_on_the_sampled_rows(tiny_model, learner, prompts):
    """logits_indices goes to the model, so lm_head (the costly layer) sees 2 rows of a 22-token
    step, not 22."""
    rows = []
    hook = tiny_model.lm_head.register_forward_hook(
        lambda module, args, out: rows.append(args[0].shape[-2])
    )
    try:
        learner.runner_forward(tiny_model, new_cache(tiny_model), step1(prompts))
    finally:
        hook.remove()
    check_equal(
        rows, [2], "the rows lm_head computed for a step of 22 tokens, 2 of them sampled"
    )


def test_attend_writes_all_new_tokens_once_per_layer(tiny_model, learner, prompts):
    """Each layer's attend writes the K/V of the step's N new tokens, once."""
    kv = share(CountingCache(new_cache(tiny_model)), methods=["write"])
    learner.runner_forward(tiny_model, kv, step1(prompts))
    check_equal(
        kv.writes,
        [(layer, 22) for layer in range(tiny_model.cfg.num_hidden_layers)],
        "the (layer, slots) of each write to the cache during a step of 22 new tokens",
    )


ATTEND = [  # block_size, requests (cached, new), heads, kv_heads, head_dim, scale
    (4, [(0, 5), (8, 1), (4, 3)], 4, 2, 16, 0.25),
    (3, [(10, 1), (0, 2)], 6, 2, 8, 1.3),
    (1, [(2, 2), (5, 1), (0, 1)], 3, 1, 4, 0.5),
]


@pytest.mark.parametrize("case", range(len(ATTEND)))
def test_backend_attend_writes_then_attends(learner, case):
    """attend(layer, q, k, v, scale) on its own: the new K/V land at their slots, then paged
    attention with that scale."""
    block_size, requests, H, KV, hd, scale = ATTEND[case]
    g, rng = torch.Generator().manual_seed(case), random.Random(case)
    kv = share(PagedKVCache(2, 20, block_size, KV, hd), methods=["write"])
    free = list(range(20))
    rng.shuffle(free)
    tables = [[free.pop() for _ in range(-(-(c + n) // block_size))] for c, n in requests]
    for (c, _), table in zip(requests, tables):  # the cached tokens are already in layer 1
        if c:
            slots = [table[p // block_size] * block_size + p % block_size for p in range(c)]
            kv.write(
                1,
                slots,
                torch.randn(c, KV, hd, generator=g),
                torch.randn(c, KV, hd, generator=g),
            )
    batch = build_batch(
        [([0] * n, c, t, True) for (c, n), t in zip(requests, tables)], block_size
    )
    N = batch.num_tokens
    q, k, v = (
        torch.randn(N, H, hd, generator=g),
        torch.randn(N, KV, hd, generator=g),
        torch.randn(N, KV, hd, generator=g),
    )
    ref = PagedKVCache(2, 20, block_size, KV, hd)
    ref.k[1].copy_(kv.k[1]), ref.v[1].copy_(kv.v[1])
    ref.write(1, batch.slot_mapping, k, v)
    backend = learner.PagedBackend(
        kv, batch.block_tables, batch.seq_lens, batch.query_start_loc, batch.slot_mapping
    )
    got = backend.attend(1, q, k, v, scale)
    want = paged_attention(
        q, ref, 1, batch.block_tables, batch.seq_lens, batch.query_start_loc, scale
    )
    check_close(
        kv.k[1],
        ref.k[1],
        f"the keys in the cache after attend (block_size {block_size})",
        atol=0,
    )
    check_close(
        got,
        want,
        f"attend for requests {requests}, block_size {block_size}, {H} heads over {KV}, scale "
        f"{scale}",
        atol=1e-5,
    )


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_random_steps_match_minillms_runner(tiny_model, learner, block_size):
    """Several steps of random mixes on any block size: the same logits and the same cache as
    minillm's ModelRunner."""
    rng = random.Random(block_size)
    mine, ref = (
        new_cache(tiny_model, block_size, 40),
        PagedKVCache.for_model(tiny_model, 40, block_size),
    )
    runner = ModelRunner(tiny_model, ref)
    free = list(range(40))
    rng.shuffle(free)
    lens = [rng.randint(3, 15) for _ in range(3)]
    seqs = [[rng.randrange(512) for _ in range(n)] for n in lens]
    tables = [[free.pop() for _ in range(-(-(n + 4) // block_size))] for n in lens]
    done = [0, 0, 0]
    for step in range(4):
        items = []
        for i, seq in enumerate(seqs):
            n = rng.randint(1, len(seq) - done[i]) if done[i] < len(seq) else 1
            if done[i] >= len(seq):
                seq.append(rng.randrange(512))  # a decode: one more token
            items.append(
                (seq[done[i] : done[i] + n], done[i], tables[i], done[i] + n == len(seq))
            )
            done[i] += n
        batch = build_batch(items, block_size)
        got = learner.runner_forward(tiny_model, mine, batch)
        check_close(
            got,
            runner.forward(batch),
            f"block_size {block_size}, step {step}: the logits",
            atol=1e-4,
        )
    check_close(
        mine.k[1], ref.k[1], f"block_size {block_size}: layer 1's keys after 4 steps", atol=1e-5
    )


LOOPS = (
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


def loops_in_attend(source: str) -> list[tuple[int, str]]:
    """(line, code) of each loop in PagedBackend.attend and in the file's functions it calls."""
    tree = ast.parse(source)
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef) and cls.name == "PagedBackend":
            functions.update(
                {f"self.{n.name}": n for n in cls.body if isinstance(n, ast.FunctionDef)}
            )
    todo, seen, found = ["self.attend"], set(), []
    while todo:
        name = todo.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        for node in ast.walk(functions[name]):
            if isinstance(node, LOOPS):
                found.append((node.lineno, ast.get_source_segment(source, node) or ""))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                todo.append(node.func.id)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "self"
            ):
                todo.append(f"self.{node.func.attr}")
    return sorted(set(found))


def uses_of_minillm(source: str) -> list[tuple[int, str]]:
    """(line, code) of every import of minillm."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            hit = any(a.name.split(".")[0] == "minillm" for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            hit = (node.module or "").split(".")[0] == "minillm"
        else:
            hit = False
        if hit:
            found.append((node.lineno, ast.get_source_segment(source, node) or ""))
    return found


def test_attend_is_one_attention_over_the_step(learner, request):
    """attend runs every layer with tensor operations over the whole step: the loops over
    requests belong to __init__, once per step; and the attention is yours, not minillm's."""
    test_backend_attend_writes_then_attends(learner, 0)
    path, source = source_under_test(request)
    uses = uses_of_minillm(source)
    if uses:
        line, code = uses[0]
        fail(
            f"{path.name} imports minillm (line {line}: {code.splitlines()[0]}): write the "
            "attention with torch alone; minillm's paged attention is the answer"
        )
    loops = loops_in_attend(source)
    if loops:
        line, code = loops[0]
        fail(
            f"attend loops in every layer (line {line}: {code.splitlines()[0]}): lay out the "
            "contexts and the mask once, in __init__, so that attend is one gather and one "
            "masked attention over all N queries"
        )
