"""Tests for SlotKVCache: slot hand-out, isolation between slots, one preallocated buffer, and
errors that name the request and change nothing; then random workloads of any size against a
model of the rules; and a check that append_step writes the step once, not once per request."""

import ast
import random

import pytest
import torch
from grading import check_close, check_equal, check_names, check_raises, fail, storage
from judge_plugin import source_under_test


def kv(n, value, kv_heads=1, head_dim=2):
    t = torch.full((n, kv_heads, head_dim), float(value))
    t[:, :, 0] += torch.arange(n)[:, None]  # every token different, so a shifted write shows
    return t, -t


def test_allocate_slot_hands_out_the_lowest_free_slot(learner):
    """Scan for the first free slot: a, b, c get 0, 1, 2; after b leaves, d gets 1; after a
    leaves, e gets 0."""
    cache = learner.SlotKVCache(4, 8, 1, 2)
    check_equal([cache.allocate_slot(r) for r in "abc"], [0, 1, 2], "the slots of a, b, c")
    cache.free_slot("b")
    check_equal(cache.allocate_slot("d"), 1, "the slot of d after b freed slot 1")
    cache.free_slot("a")
    check_equal(
        [cache.allocate_slot("e"), cache.allocate_slot("f")],
        [0, 3],
        "the slots of e and f after a freed slot 0",
    )
    check_equal(cache.slot_of("c"), 2, "slot_of('c')")


def test_buffers_have_the_shape_asked_for(learner):
    """k and v are [max_batch, max_ctx, num_kv_heads, head_dim], whatever the sizes."""
    cache = learner.SlotKVCache(3, 11, 5, 7)
    check_equal(
        [tuple(cache.k.shape), tuple(cache.v.shape)],
        [(3, 11, 5, 7)] * 2,
        "the shapes of cache.k and cache.v",
    )


def test_full_cache_raises_no_free_slot_error(learner):
    """With every slot taken, allocate_slot raises OutOfSlotsError and nobody loses their
    slot."""
    cache = learner.SlotKVCache(3, 8, 1, 2)
    for r in "abc":
        cache.allocate_slot(r)
    check_raises(
        learner.OutOfSlotsError,
        cache.allocate_slot,
        "d",
        what="allocate_slot('d') with all 3 slots taken",
    )
    check_equal(
        [cache.slot_of(r) for r in "abc"], [0, 1, 2], "the slots of a, b, c after the refusal"
    )
    cache.free_slot("b")
    check_equal(cache.allocate_slot("d"), 1, "allocate_slot('d') once b has left")


def test_a_request_holds_at_most_one_slot(learner):
    """allocate_slot for a request that already has a slot is a mistake: ValueError naming it,
    and no second slot."""
    cache = learner.SlotKVCache(3, 8, 1, 2)
    cache.allocate_slot("job-17")
    error = check_raises(
        ValueError, cache.allocate_slot, "job-17", what="allocate_slot('job-17') twice"
    )
    check_names(error, "job-17", "allocate_slot('job-17') twice")
    check_equal(
        cache.allocate_slot("b"),
        1,
        "the slot of b after the refused second allocate_slot of job-17",
    )


def test_request_ids_can_be_any_hashable_value(learner):
    """Ids are the caller's: ints, strings and tuples alike."""
    cache = learner.SlotKVCache(3, 8, 1, 2)
    check_equal(
        [cache.allocate_slot(7), cache.allocate_slot("7"), cache.allocate_slot((1, 2))],
        [0, 1, 2],
        "the slots of 7, '7', (1, 2)",
    )
    cache.free_slot(7)
    check_equal(
        [cache.slot_of("7"), cache.allocate_slot(8)],
        [1, 0],
        "[slot_of('7'), allocate_slot(8)] after freeing 7",
    )


def test_append_returns_the_whole_history(learner):
    """append writes after the slot's stored tokens and returns all of them, old and new."""
    cache = learner.SlotKVCache(2, 8, 3, 4)
    cache.allocate_slot("a")
    first, second = kv(3, 1, 3, 4), kv(2, 2, 3, 4)
    cache.append("a", *first)
    k, v = cache.append("a", *second)
    check_close(
        k,
        torch.cat([first[0], second[0]]),
        "the keys of a after appending 3 then 2 tokens",
        atol=0,
    )
    check_close(
        v,
        torch.cat([first[1], second[1]]),
        "the values of a after appending 3 then 2 tokens",
        atol=0,
    )


def test_slots_do_not_see_each_other(learner):
    """Each slot has its own length: a's tokens never show up in b's history."""
    cache = learner.SlotKVCache(2, 8, 1, 2)
    cache.allocate_slot("a"), cache.allocate_slot("b")
    cache.append("a", *kv(2, 1))
    cache.append("b", *kv(3, 5))
    k, _ = cache.append("a", *kv(1, 2))
    check_close(
        k,
        torch.cat([kv(2, 1)[0], kv(1, 2)[0]]),
        "the keys of a, interleaved with b's appends",
        atol=0,
    )
    k, _ = cache.append("b", *kv(1, 6))
    check_close(
        k,
        torch.cat([kv(3, 5)[0], kv(1, 6)[0]]),
        "the keys of b, interleaved with a's appends",
        atol=0,
    )


def test_history_lives_in_the_preallocated_buffer(learner):
    """The keys of the request in slot s are cache.k[s, :length]: write into the buffer, not a
    new tensor."""
    cache = learner.SlotKVCache(3, 8, 2, 2)
    before = [storage(cache, "k"), storage(cache, "v")]
    cache.allocate_slot("a"), cache.allocate_slot("b")
    cache.append("b", *kv(2, 7, 2, 2))
    cache.append("b", *kv(3, 8, 2, 2))
    check_close(
        cache.k[1, :5],
        torch.cat([kv(2, 7, 2, 2)[0], kv(3, 8, 2, 2)[0]]),
        "cache.k[1, :5] (slot 1 holds b)",
        atol=0,
    )
    check_close(cache.v[1, :2], kv(2, 7, 2, 2)[1], "cache.v[1, :2] (slot 1 holds b)", atol=0)
    check_equal(
        [storage(cache, "k"), storage(cache, "v")],
        before,
        "where cache.k and cache.v live after two appends (allocate them once, in __init__)",
    )


def test_a_reused_slot_starts_empty(learner):
    """Reset the slot's length when it is handed out again: the next owner must not inherit
    tokens."""
    cache = learner.SlotKVCache(1, 8, 1, 2)
    cache.allocate_slot("a")
    cache.append("a", *kv(4, 1))
    cache.free_slot("a")
    cache.allocate_slot("b")
    k, _ = cache.append("b", *kv(1, 3))
    check_close(k, kv(1, 3)[0], "the history of b, the new owner of a's old slot", atol=0)


def test_context_overflow_raises_and_keeps_the_slot(learner):
    """Check length + T <= max_ctx before writing: ValueError naming the request, the stored
    tokens untouched."""
    cache = learner.SlotKVCache(2, 5, 1, 2)
    cache.allocate_slot("x"), cache.allocate_slot("job-23")
    cache.append("job-23", *kv(3, 1))
    error = check_raises(
        ValueError,
        cache.append,
        "job-23",
        *kv(3, 9),
        what="appending 3 tokens to 3 stored, max_ctx 5",
    )
    check_names(error, "job-23", "the refused append to job-23")
    check_close(cache.k[1, :3], kv(3, 1)[0], "cache.k[1, :3] after the refused append", atol=0)
    k, _ = cache.append("job-23", *kv(2, 2))
    check_close(
        k,
        torch.cat([kv(3, 1)[0], kv(2, 2)[0]]),
        "the keys of a after the refused append and one that fits",
        atol=0,
    )


@pytest.mark.parametrize("method", ["free_slot", "slot_of", "append"])
def test_unknown_requests_raise_value_error_naming_them(learner, method):
    """free_slot, slot_of and append of a request without a slot raise ValueError naming it, and
    change nothing."""
    cache = learner.SlotKVCache(2, 4, 1, 2)
    cache.allocate_slot("a")
    cache.append("a", *kv(1, 4))
    args = ("ghost", *kv(1, 1)) if method == "append" else ("ghost",)
    error = check_raises(ValueError, getattr(cache, method), *args, what=f"{method}('ghost')")
    check_names(error, "ghost", f"{method}('ghost')")
    check_equal(
        [cache.slot_of("a"), cache.used_tokens(), cache.allocate_slot("b")],
        [0, 1, 1],
        f"[slot_of('a'), used_tokens(), allocate_slot('b')] after {method}('ghost')",
    )


def test_claimed_tokens_dwarf_used_tokens(learner):
    """used = tokens stored by requests holding a slot; claimed = max_ctx per slot a request
    holds, free slots not counted."""
    cache = learner.SlotKVCache(4, 100, 1, 2)
    for r, n in [("a", 10), ("b", 30), ("c", 5)]:
        cache.allocate_slot(r)
        cache.append(r, *kv(n, 1))
    cache.free_slot("c")
    check_equal(
        [cache.used_tokens(), cache.claimed_tokens()],
        [40, 200],
        "[used_tokens(), claimed_tokens()] with a: 10 and b: 30 tokens in slots of 100",
    )


@pytest.mark.parametrize("seed", range(3))
def test_random_workload_follows_the_rules(learner, seed):
    """Any sizes and any mix of allocate_slot/append/free_slot: the lowest free slot, histories
    per slot, errors that change nothing."""
    rng = random.Random(seed)
    max_batch, max_ctx, kv_heads, head_dim = (
        rng.randint(1, 6),
        rng.randint(2, 24),
        rng.randint(1, 3),
        rng.randint(1, 5),
    )
    cache = learner.SlotKVCache(max_batch, max_ctx, kv_heads, head_dim)
    slots, history, next_id = {}, {}, 0  # the model: request -> slot, request -> stored keys
    for step in range(60):
        op = rng.choice(
            ["allocate_slot", "allocate_slot", "append", "append", "append", "free_slot"]
        )
        what = f"seed {seed}, step {step} (max_batch {max_batch}, max_ctx {max_ctx}): {op}"
        if op == "allocate_slot":
            rid, next_id = f"r{next_id}", next_id + 1
            if len(slots) == max_batch:
                check_raises(learner.OutOfSlotsError, cache.allocate_slot, rid, what=what)
                continue
            slot = min(set(range(max_batch)) - set(slots.values()))
            check_equal(cache.allocate_slot(rid), slot, f"{what}({rid!r})")
            slots[rid], history[rid] = slot, torch.zeros(0, kv_heads, head_dim)
        elif op == "append" and slots:
            rid = rng.choice(sorted(slots))
            k = torch.randn(
                rng.randint(1, 6),
                kv_heads,
                head_dim,
                generator=torch.Generator().manual_seed(step),
            )
            if len(history[rid]) + len(k) > max_ctx:
                check_raises(
                    ValueError,
                    cache.append,
                    rid,
                    k,
                    2 * k,
                    what=f"{what}({rid!r}) of {len(k)} tokens past max_ctx",
                )
                continue
            history[rid] = torch.cat([history[rid], k])
            got_k, got_v = cache.append(rid, k, 2 * k)
            check_close(got_k, history[rid], f"{what}({rid!r}): the keys returned", atol=0)
            check_close(
                got_v, 2 * history[rid], f"{what}({rid!r}): the values returned", atol=0
            )
        elif op == "free_slot" and slots:
            rid = rng.choice(sorted(slots))
            cache.free_slot(rid)
            del slots[rid], history[rid]
        check_equal(
            [cache.used_tokens(), cache.claimed_tokens()],
            [sum(len(h) for h in history.values()), len(slots) * max_ctx],
            f"{what}: [used, claimed] tokens",
        )


def token(value, kv_heads=1, head_dim=2):
    """One new token [kv_heads, head_dim] per request: a k row and its v row."""
    t = torch.full((kv_heads, head_dim), float(value))
    return t, -t


def test_append_step_pads_to_the_longest(learner):
    """job-a holds 3 tokens, job-b none: one step for [job-b, job-a] returns [2, 4, ...]
    histories, in that order, and lengths [1, 4]."""
    cache = learner.SlotKVCache(3, 8, 1, 2)
    cache.allocate_slot("job-a"), cache.allocate_slot("job-b")
    first = kv(3, 1)
    cache.append("job-a", *first)
    (kb, vb), (ka, va) = token(7), token(8)
    k, v, lengths = cache.append_step(
        ["job-b", "job-a"], torch.stack([kb, ka]), torch.stack([vb, va])
    )
    check_equal(
        list(lengths), [1, 4], "the lengths returned by append_step(['job-b', 'job-a'])"
    )
    check_equal(
        [tuple(k.shape), tuple(v.shape)],
        [(2, 4, 1, 2)] * 2,
        "the shapes of the histories returned (padded to the longest, 4 tokens)",
    )
    check_close(k[0, :1], kb[None], "row 0 of the keys returned (job-b's history)", atol=0)
    check_close(
        k[1, :4], torch.cat([first[0], ka[None]]), "row 1 of the keys returned (job-a)", atol=0
    )
    check_close(
        v[1, :4],
        torch.cat([first[1], va[None]]),
        "row 1 of the values returned (job-a)",
        atol=0,
    )
    check_equal(cache.used_tokens(), 5, "used_tokens() after the step")


@pytest.mark.parametrize("seed", range(3))
def test_append_step_equals_separate_appends(learner, seed):
    """Steps over random subsets of the requests, in random order: the same histories, lengths
    and buffers as one append per request."""
    rng = random.Random(seed)
    max_batch, max_ctx, kv_heads, head_dim = (
        rng.randint(2, 6),
        rng.randint(6, 16),
        rng.randint(1, 3),
        rng.randint(1, 4),
    )
    stepped = learner.SlotKVCache(max_batch, max_ctx, kv_heads, head_dim)
    separate = learner.SlotKVCache(max_batch, max_ctx, kv_heads, head_dim)
    ids = [f"r{i}" for i in range(max_batch)]
    rng.shuffle(ids)  # so that slot order and request order differ
    lengths = {}
    for rid in ids:
        stepped.allocate_slot(rid), separate.allocate_slot(rid)
        lengths[rid] = rng.randint(0, 3)
        if lengths[rid]:
            prompt = kv(lengths[rid], rng.randint(1, 9), kv_heads, head_dim)
            stepped.append(rid, *prompt)
            separate.append(rid, *prompt)
    g = torch.Generator().manual_seed(seed)
    for step in range(4):
        what = f"seed {seed}, step {step} (max_batch {max_batch}, max_ctx {max_ctx})"
        group = rng.sample(ids, rng.randint(1, len(ids)))
        k = torch.randn(len(group), kv_heads, head_dim, generator=g)
        v = torch.randn(len(group), kv_heads, head_dim, generator=g)
        got_k, got_v, got_lengths = stepped.append_step(group, k, v)
        expected = [
            separate.append(rid, k[i : i + 1], v[i : i + 1]) for i, rid in enumerate(group)
        ]
        for rid in group:
            lengths[rid] += 1
        check_equal(
            list(got_lengths), [lengths[r] for r in group], f"{what}: the lengths of {group}"
        )
        longest = max(lengths[r] for r in group)
        check_equal(
            [tuple(got_k.shape), tuple(got_v.shape)],
            [(len(group), longest, kv_heads, head_dim)] * 2,
            f"{what}: the shapes of the histories of {group}",
        )
        for i, (rid, (ek, ev)) in enumerate(zip(group, expected)):
            check_close(got_k[i, : lengths[rid]], ek, f"{what}: the keys of {rid!r}", atol=0)
            check_close(got_v[i, : lengths[rid]], ev, f"{what}: the values of {rid!r}", atol=0)
        for rid in ids:
            s, n = stepped.slot_of(rid), lengths[rid]
            check_close(
                stepped.k[s, :n],
                separate.k[separate.slot_of(rid), :n],
                f"{what}: cache.k of {rid!r} in its slot",
                atol=0,
            )
        check_equal(stepped.used_tokens(), separate.used_tokens(), f"{what}: used_tokens()")


def test_append_step_refuses_a_duplicate_request(learner):
    """One step with job-5 twice would write one (slot, offset) twice: ValueError naming job-5,
    and nothing written."""
    cache = learner.SlotKVCache(3, 8, 1, 2)
    cache.allocate_slot("job-5"), cache.allocate_slot("job-9")
    cache.append("job-5", *kv(2, 1))
    k, v = torch.stack([token(3)[0], token(4)[0], token(5)[0]]), torch.zeros(3, 1, 2)
    error = check_raises(
        ValueError,
        cache.append_step,
        ["job-5", "job-9", "job-5"],
        k,
        v,
        what="append_step(['job-5', 'job-9', 'job-5'])",
    )
    check_names(error, "job-5", "append_step with job-5 twice")
    check_equal(cache.used_tokens(), 2, "used_tokens() after the refused step")
    got, _ = cache.append("job-5", *kv(1, 6))
    check_close(
        got,
        torch.cat([kv(2, 1)[0], kv(1, 6)[0]]),
        "the keys of job-5 after the refused step and one append",
        atol=0,
    )


@pytest.mark.parametrize("fault", ["unknown", "full"])
def test_append_step_errors_change_nothing(learner, fault):
    """A request without a slot, or one whose slot is full, last in the step: ValueError naming
    it, and the requests before it are not written either."""
    cache = learner.SlotKVCache(3, 3, 1, 2)
    cache.allocate_slot("job-1"), cache.allocate_slot("job-2")
    cache.append("job-1", *kv(1, 1))
    cache.append("job-2", *kv(3, 2))  # job-2's slot is full
    bad = "ghost" if fault == "unknown" else "job-2"
    error = check_raises(
        ValueError,
        cache.append_step,
        ["job-1", bad],
        torch.ones(2, 1, 2),
        torch.ones(2, 1, 2),
        what=f"append_step(['job-1', {bad!r}]) ({fault})",
    )
    check_names(error, bad, f"append_step with {bad!r} ({fault})")
    check_equal(cache.used_tokens(), 4, f"used_tokens() after the refused step ({fault})")
    got, _ = cache.append("job-1", *kv(1, 5))
    check_close(
        got,
        torch.cat([kv(1, 1)[0], kv(1, 5)[0]]),
        f"the keys of job-1 after the refused step ({fault}) and one append",
        atol=0,
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


def _is_buffer(node) -> bool:
    """self.k or self.v, or an index or slice of them (self.k[slot], self.v[rows][:, 0])."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return (
        isinstance(node, ast.Attribute)
        and node.attr in ("k", "v")
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _targets(node) -> list:
    if isinstance(node, (ast.Tuple, ast.List)):
        return [t for e in node.elts for t in _targets(e)]
    return [node.value if isinstance(node, ast.Starred) else node]


def _writes(node) -> list:
    """The writes into the buffers directly under `node`: an assignment to a piece of self.k or
    self.v, an in-place method of one (copy_, index_put_, ...), or a call of self.append."""
    found = []
    for n in ast.walk(node):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(
                isinstance(t, ast.Subscript) and _is_buffer(t)
                for target in targets
                for t in _targets(target)
            ):
                found.append(n)
        elif (
            isinstance(n, ast.Attribute)
            and (_is_buffer(n.value) and (n.attr == "__setitem__" or _in_place(n.attr)))
            or _is_append(n)
        ):
            found.append(n)
    return found


def _in_place(method: str) -> bool:
    """copy_, index_put_, scatter_, ...: torch's in-place methods end in one underscore."""
    return method.endswith("_") and not method.startswith("_")


def _is_append(node) -> bool:
    """self.append, the per-request write that append_step replaces."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "append"
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def writes_in_loops(source: str) -> list[tuple[int, str]]:
    """(line, code) of each loop in append_step, or in a method or function of the file it
    calls, that writes into the buffers (itself, or through a method or function it calls), and
    of each use of self.append there."""
    tree = ast.parse(source)
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef):
            functions.update(
                {f"self.{n.name}": n for n in cls.body if isinstance(n, ast.FunctionDef)}
            )

    def called(node) -> list[str]:
        names = []
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                names.append(n.func.id)
            elif (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and isinstance(n.func.value, ast.Name)
                and n.func.value.id == "self"
            ):
                names.append(f"self.{n.func.attr}")
        return [name for name in names if name in functions and name != "self.append"]

    def writes(node, seen=()) -> bool:  # node, or a function it calls, writes into a buffer
        return bool(_writes(node)) or any(
            writes(functions[name], (*seen, name)) for name in called(node) if name not in seen
        )

    todo, seen, found = ["self.append_step"], set(), []
    while todo:
        name = todo.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        for node in ast.walk(functions[name]):
            if (isinstance(node, LOOPS) and writes(node)) or _is_append(node):
                found.append((node.lineno, ast.get_source_segment(source, node) or ""))
        todo += called(functions[name])
    return sorted(set(found))


def test_append_step_writes_once_whatever_the_number_of_requests(learner, request):
    """append_step stores the N tokens with indexed writes outside any loop (and never through
    append): one write per buffer, whatever N, as the chapter's one_forward_decode_step does."""
    test_append_step_pads_to_the_longest(learner)
    path, source = source_under_test(request)
    loops = writes_in_loops(source)
    if loops:
        line, code = loops[0]
        fail(
            f"append_step writes one request at a time (line {line}: {code.splitlines()[0]}): "
            "build the N slots and N offsets as two index tensors and store the step with one "
            "indexed write into k and one into v"
        )
