"""Tests for PrefixBlockPool: sharing, the last-token rule, the LRU free queue freed tail first,
reviving and
forgetting cached blocks, all-or-nothing allocation; then random workloads against a model of
the rules."""

import random

from grading import check_equal, check_raises


def state(pool, num_blocks):
    return {
        "free_queue": pool.free_queue(),
        "owners": [pool.ref_count(b) for b in range(num_blocks)],
    }


def test_a_fresh_pool_hands_out_blocks_from_the_front(learner):
    """A new pool's queue is 0, 1, ...; a request of 10 tokens in blocks of 4 takes three
    blocks."""
    pool = learner.PrefixBlockPool(6, 4)
    check_equal(
        pool.allocate(list(range(10))),
        [0, 1, 2],
        "allocate(0..9) on a fresh pool of 6 blocks of 4",
    )
    check_equal(
        [pool.free_queue(), pool.num_free], [[3, 4, 5], 3], "[free_queue(), num_free] after it"
    )


def test_a_request_shares_the_full_blocks_of_an_earlier_one(learner):
    """Blocks 0 and 1 of the first request hold the same tokens after the same prefix: the
    second shares them."""
    pool = learner.PrefixBlockPool(8, 4)
    a = pool.allocate(list(range(10)))
    b = pool.allocate(list(range(8)) + [50, 51])
    check_equal(b, a[:2] + [3], "the second request's block table")
    check_equal([pool.ref_count(x) for x in range(4)], [2, 2, 1, 1], "ref_count of blocks 0..3")


def test_a_block_is_named_by_its_whole_prefix(learner):
    """The same 4 tokens after a different first block are a different block, with K/V of their
    own."""
    pool = learner.PrefixBlockPool(8, 4)
    a = pool.allocate([1, 2, 3, 4, 9, 9, 9, 9, 0])
    b = pool.allocate([5, 6, 7, 8, 9, 9, 9, 9, 0])
    check_equal(
        b[:2] == a[:2] or b[1] == a[1],
        False,
        "whether the second request shares a block with the first",
    )
    check_equal(
        pool.lookup([5, 6, 7, 8, 9, 9, 9, 9, 1]),
        b[:2],
        "lookup of a request that starts like the second one",
    )


def test_lookup_never_returns_the_block_of_the_last_token(learner):
    """A prompt of exactly k cached blocks gets k - 1; one more token and it gets all k."""
    pool = learner.PrefixBlockPool(8, 4)
    table = pool.allocate(list(range(12)))  # three full blocks, all cached
    check_equal(
        pool.lookup(list(range(12))),
        table[:2],
        "lookup(0..11): the block with token 11 is computed again",
    )
    check_equal(pool.lookup(list(range(13))), table, "lookup(0..12)")
    check_equal(pool.lookup(list(range(4))), [], "lookup(0..3)")


def test_freed_blocks_stay_cached_and_queue_tail_first(learner):
    """free releases the last block first: a request's tail is nearer the front of the queue
    than its head."""
    pool = learner.PrefixBlockPool(6, 4)
    table = pool.allocate(list(range(12)))
    pool.free(table)
    check_equal(
        pool.free_queue(), [3, 4, 5, 2, 1, 0], "free_queue() after freeing blocks [0, 1, 2]"
    )
    check_equal(
        pool.lookup(list(range(13))), [0, 1, 2], "lookup(0..12) after the request finished"
    )


def test_handing_out_a_cached_block_forgets_it(learner):
    """Eviction happens at the front of the queue, when a block is handed out: a prefix shrinks
    from its tail."""
    pool = learner.PrefixBlockPool(6, 4)
    pool.free(pool.allocate(list(range(12))))
    pool.allocate(
        [70] * 16
    )  # four fresh blocks: 3, 4, 5, then 2 (the tail of the cached prefix)
    check_equal(
        pool.lookup(list(range(13))), [0, 1], "lookup(0..12) once block 2 was handed out again"
    )


def test_a_hit_on_a_free_block_takes_it_back(learner):
    """A cached block nobody holds leaves the free queue when a request finds it, and keeps its
    name."""
    pool = learner.PrefixBlockPool(6, 4)
    pool.free(pool.allocate(list(range(12))))
    table = pool.allocate(list(range(13)))
    check_equal(
        table, [0, 1, 2, 3], "the block table of a request extending the freed one by a token"
    )
    check_equal(
        state(pool, 6),
        {"free_queue": [4, 5], "owners": [1, 1, 1, 1, 0, 0]},
        "the pool after it",
    )


def test_a_shared_block_returns_after_its_last_owner(learner):
    """Two owners: the first free keeps the block held, the second puts it in the queue."""
    pool = learner.PrefixBlockPool(8, 4)
    a = pool.allocate(list(range(9)))
    b = pool.allocate(list(range(9)))
    pool.free(a)
    check_equal(
        state(pool, 8)["owners"][:2],
        [1, 1],
        "owners of the shared blocks after one request freed them",
    )
    pool.free(b)
    check_equal(
        pool.free_queue()[-2:],
        [1, 0],
        "the last two entries of free_queue() after both freed them",
    )


def test_allocation_is_all_or_nothing(learner):
    """Cached hits that leave the free queue count against it: too few blocks raises and changes
    nothing."""
    pool = learner.PrefixBlockPool(4, 4)
    pool.free(pool.allocate(list(range(9))))  # blocks 0, 1 cached and free, block 2 free
    before = state(pool, 4)
    check_raises(
        learner.OutOfBlocksError,
        pool.allocate,
        list(range(8)) + [60] * 12,
        what="allocate of 2 cached blocks + 3 new ones from a pool of 4",
    )
    check_equal(state(pool, 4), before, "the pool after the refused allocate")
    check_equal(
        len(pool.allocate(list(range(8)) + [60] * 8)), 4, "the length of a table that just fits"
    )


def test_freeing_a_block_nobody_holds_raises_and_changes_nothing(learner):
    """A double free is the caller's bug: ValueError, and the queue and owners stay as they
    were."""
    pool = learner.PrefixBlockPool(4, 2)
    a = pool.allocate([1, 2, 3])
    pool.free(a)
    before = state(pool, 4)
    check_raises(ValueError, pool.free, a, what=f"free({a}) a second time")
    check_equal(state(pool, 4), before, "the pool after the refused double free")


class Model:
    """The rules of the task, written plainly: what every call must return."""

    def __init__(self, num_blocks, block_size):
        self.bs, self.owners, self.queue, self.cache = (
            block_size,
            [0] * num_blocks,
            list(range(num_blocks)),
            {},
        )

    def lookup(self, tokens):
        found = []
        for i in range((len(tokens) - 1) // self.bs):
            name = tuple(tokens[: (i + 1) * self.bs])
            if name not in self.cache:
                break
            found.append(self.cache[name])
        return found

    def allocate(self, tokens):
        hits = self.lookup(tokens)
        need = -(-len(tokens) // self.bs) - len(hits)
        if need + sum(self.owners[b] == 0 for b in hits) > len(self.queue):
            return None
        for b in hits:
            if self.owners[b] == 0:
                self.queue.remove(b)
            self.owners[b] += 1
        table = hits + [self.queue.pop(0) for _ in range(need)]
        for b in table[len(hits) :]:
            self.cache = {name: block for name, block in self.cache.items() if block != b}
            self.owners[b] = 1
        for i in range(len(hits), len(tokens) // self.bs):
            self.cache.setdefault(tuple(tokens[: (i + 1) * self.bs]), table[i])
        return table

    def free(self, table):
        for b in reversed(table):
            self.owners[b] -= 1
            if self.owners[b] == 0:
                self.queue.append(b)


def test_random_workloads_follow_the_rules(learner):
    """Random requests built from shared heads on two pools side by side, freed in random order;
    now
    and then a free of a table that lists a block nobody holds (or a block held once, twice).

    Two pools share nothing: each answers as if it were alone. A refused free raises
    ValueError and changes nothing, wherever in the table the bad block is. After every step:
    the free queue, and the owners of every block the step touched; after every case: the
    owners of every block."""
    rng = random.Random(5)
    for case in range(20):
        block_size = rng.choice([1, 2, 3, 4, 8])
        sizes = [(rng.randint(3, 30), block_size) for _ in range(2)]
        pools = [learner.PrefixBlockPool(n, bs) for n, bs in sizes]
        models = [Model(n, bs) for n, bs in sizes]
        heads = [
            [rng.randrange(9) for _ in range(rng.randint(0, 3 * block_size + 2))]
            for _ in range(3)
        ]
        held = [[], []]
        for step in range(40):
            k = rng.randrange(
                2
            )  # the same heads: a pool that finds the other's blocks is caught
            pool, model, num_blocks = pools[k], models[k], sizes[k][0]
            name = (
                f"case {case}, pool {k} of two (of {sizes[0][0]} and {sizes[1][0]} blocks of "
                f"{block_size}), step {step}"
            )
            table = list(rng.choice(held[k])) if held[k] else []
            faults = [
                b for b in range(num_blocks) if table and table.count(b) >= model.owners[b]
            ]
            if faults and rng.random() < 0.15:
                bad = rng.choice(faults)
                table.insert(
                    rng.randint(0, len(table)), bad
                )  # anywhere: check before any change
                check_raises(
                    ValueError,
                    pool.free,
                    table,
                    what=f"{name}: free({table}), whose block {bad} is held by "
                    f"{model.owners[bad]} request(s) but listed {table.count(bad)} "
                    "time(s)",
                )
                touched, did = (
                    table,
                    f"the refused free({table}) (a refused call changes nothing)",
                )
            elif held[k] and rng.random() < 0.4:
                table = held[k].pop(rng.randrange(len(held[k])))
                pool.free(table)
                model.free(table)
                touched, did = table, f"free({table})"
            else:
                tokens = rng.choice(heads) + [
                    rng.randrange(9) for _ in range(rng.randint(1, 2 * block_size))
                ]
                touched = model.lookup(
                    tokens
                )  # a refused allocate must leave its hits' owners as they were
                want = model.allocate(tokens)
                what = did = f"allocate({tokens})"
                if want is None:
                    check_raises(
                        learner.OutOfBlocksError, pool.allocate, tokens, what=f"{name}: {what}"
                    )
                else:
                    check_equal(pool.allocate(tokens), want, f"{name}: {what}")
                    held[k].append(want)
                    touched = want
            blocks = sorted(set(touched))
            check_equal(
                {
                    "free_queue": pool.free_queue(),
                    "owners": {b: pool.ref_count(b) for b in blocks},
                },
                {"free_queue": model.queue, "owners": {b: model.owners[b] for b in blocks}},
                f"{name}: the pool after {did}",
            )
        for k in range(2):
            check_equal(
                state(pools[k], sizes[k][0]),
                {"free_queue": models[k].queue, "owners": models[k].owners},
                f"case {case}, pool {k}, after its last step",
            )
