"""Tests for gather_k: the example, random batches of any shape against torch indexing (bit for
bit), tiles that cross page boundaries, every length of the last page, requests without pages,
other dtypes, a direct launch that must write nothing outside each request's rows, and the
errors on bad page tables."""

import random

import torch
from grading import check_equal, check_names, check_raises, check_shape, launch


def cache(seed, num_pages, page_size, kv_heads, head_dim, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(num_pages, page_size, kv_heads, head_dim, generator=g).to(dtype)


def seq_lens(indptr, last, page_size):
    return [
        (indptr[b + 1] - indptr[b] - 1) * page_size + last[b]
        if indptr[b + 1] > indptr[b]
        else 0
        for b in range(len(last))
    ]


def expected(k_cache, indptr, indices, last):
    """Each request's pages in order, flattened to positions, cut at its length, joined."""
    lens = seq_lens(indptr, last, k_cache.shape[1])
    parts = [
        k_cache[torch.tensor(indices[indptr[b] : indptr[b + 1]], dtype=torch.long)].flatten(
            0, 1
        )[: lens[b]]
        for b in range(len(last))
    ]
    return torch.cat([k_cache[:0].flatten(0, 1), *parts])


def random_batch(rng, page_size, num_requests, max_len=70, spare=3):
    """A CSR page table for requests of random lengths (0 included), pages drawn from a pool."""
    lens = [0 if rng.random() < 0.2 else rng.randint(1, max_len) for _ in range(num_requests)]
    pages = [-(-n // page_size) for n in lens]
    pool = list(range(sum(pages) + spare))
    rng.shuffle(pool)
    indptr = [0]
    for n in pages:
        indptr.append(indptr[-1] + n)
    last = [n - (p - 1) * page_size if p else 0 for n, p in zip(lens, pages)]
    return indptr, pool[: indptr[-1]], last, len(pool)


def check_gather(learner, k_cache, indptr, indices, last):
    check_equal(
        learner.gather_k(k_cache, indptr, indices, last),
        expected(k_cache, indptr, indices, last),
        f"gather_k(k_cache {list(k_cache.shape)}, kv_indptr {indptr}, kv_indices {indices}, "
        f"kv_last_page_len {last})",
    )


def test_the_example(learner):
    """Pages of 3, 2 KV heads of 80: request 0 has 7 pages (20 tokens, 2 tiles, the first
    ending in the middle of its sixth page), request 1 none, request 2 two pages (4 tokens)."""
    k_cache = cache(0, 10, 3, 2, 80)
    check_gather(learner, k_cache, [0, 7, 7, 9], [5, 0, 7, 3, 1, 6, 2, 9, 4], [2, 0, 1])


def test_random_batches_and_shapes_match_torch_indexing(learner):
    """Any page size, any number of KV heads, rows that are not a power of two (80, 12), one to
    five requests of several tiles, some without pages."""
    rng = random.Random(7)
    for case in range(10):
        page_size = rng.choice([1, 2, 3, 5, 8, 16, 24])
        kv_heads, head_dim = rng.randint(1, 4), rng.choice([4, 12, 16, 80])
        indptr, indices, last, num_pages = random_batch(rng, page_size, rng.randint(1, 5))
        k_cache = cache(case, num_pages, page_size, kv_heads, head_dim)
        check_gather(learner, k_cache, indptr, indices, last)


def test_tiles_that_cross_page_boundaries(learner):
    """Page sizes that do not divide the tile of 16 (3, 5, 6) and one larger than it that is not
    a multiple (24): tiles start and end in the middle of pages, and the rows of one tile come
    from several pages, in the request's order, not the pool's."""
    for page_size in (3, 5, 6, 24):
        rng = random.Random(page_size)
        pages = [-(-61 // page_size), -(-40 // page_size)]  # 61 and 40 tokens
        pool = rng.sample(range(sum(pages) + 3), sum(pages))
        last = [61 - (pages[0] - 1) * page_size, 40 - (pages[1] - 1) * page_size]
        k_cache = cache(30 + page_size, sum(pages) + 3, page_size, 2, 8)
        check_gather(learner, k_cache, [0, pages[0], sum(pages)], pool, last)


def test_every_length_of_the_last_page(learner):
    """kv_last_page_len from 1 to the page size: only that much of the last page is read."""
    k_cache = cache(1, 6, 8, 1, 4)
    for last in range(1, 9):
        check_gather(learner, k_cache, [0, 3, 5], [3, 1, 0, 5, 2], [last, 9 - last])


def test_requests_without_pages(learner):
    """A request with no pages (kv_last_page_len 0) has no rows; a batch of only such requests
    gives a tensor [0, kv_heads, head_dim] in the cache's dtype."""
    k_cache = cache(2, 5, 4, 2, 4)
    check_gather(learner, k_cache, [0, 0, 2, 2, 3], [4, 1, 0], [0, 3, 0, 4])
    for kv_heads, head_dim, dtype in ((2, 8, torch.float32), (3, 12, torch.float16)):
        k_cache = cache(3, 2, 4, kv_heads, head_dim, dtype)
        got = learner.gather_k(k_cache, [0, 0, 0], [], [0, 0])
        what = (
            f"gather_k(k_cache [2, 4, {kv_heads}, {head_dim}] {dtype}, [0, 0, 0], [], [0, 0])"
        )
        check_shape(got, (0, kv_heads, head_dim), what)
        check_equal(str(got.dtype), str(dtype), f"the dtype of {what}")


MARK = -7777.0  # no cache holds it: out's rows between requests and after the last


def test_the_kernel_writes_only_each_requests_rows(learner):
    """gather_k_kernel launched directly, grid (requests, cdiv(longest, TILE)), with tiles of 8,
    16 or 32 positions and rows of ROW = kv_heads * head_dim numbers padded to BLOCK_ROW, the
    next power of two. out_start leaves gaps of marker rows between the requests' rows and after
    the last: every row must be right and every marker untouched. The grid is sized for the
    longest request, so a shorter request's programs past its length must write nothing, and a
    request's pages end where the next one's begin in kv_indices.
    """
    rng = random.Random(12)
    for case in range(8):
        page_size, kv_heads = rng.choice([1, 3, 4, 5, 8]), rng.randint(1, 3)
        head_dim, tile = rng.choice([4, 6, 12, 20, 80]), rng.choice([8, 16, 32])
        indptr, indices, last, num_pages = random_batch(rng, page_size, rng.randint(2, 4), 50)
        lens = seq_lens(indptr, last, page_size)
        if not max(lens):
            continue
        k_cache = cache(20 + case, num_pages, page_size, kv_heads, head_dim)
        row = kv_heads * head_dim
        gap = tile + 1  # marker rows after each request
        starts = [sum(lens[:b]) + gap * b for b in range(len(lens))]
        total = sum(lens) + gap * len(lens)
        grid = (len(lens), -(-max(lens) // tile))
        args = launch(
            learner.gather_k_kernel,
            grid,
            k_cache,
            torch.tensor(indptr, dtype=torch.long),
            torch.tensor(indices + [0] * tile, dtype=torch.long),
            torch.tensor(last, dtype=torch.long),
            torch.tensor(starts, dtype=torch.long),
            torch.full((total * row,), MARK),
            k_cache.stride(0),
            k_cache.stride(1),
            ROW=row,
            BLOCK_ROW=1 << (row - 1).bit_length(),
            PAGE_SIZE=page_size,
            TILE=tile,
        )
        out = args[5].view(total, kv_heads, head_dim)
        what = (
            f"case {case}: gather_k_kernel[{grid}] with TILE {tile} on a cache "
            f"[{num_pages}, {page_size}, {kv_heads}, {head_dim}], kv_indptr {indptr}, "
            f"kv_indices {indices}, kv_last_page_len {last}, out_start {starts}"
        )
        rows = torch.cat([out[s : s + n] for s, n in zip(starts, lens)])
        check_equal(rows, expected(k_cache, indptr, indices, last), f"{what}: the rows")
        marked = [
            s + n + i
            for s, n in zip(starts, lens)
            for i in range(gap)
            if (out[s + n + i] != MARK).any()
        ]
        check_equal(marked, [], f"{what}: the marker rows your kernel wrote")


def test_the_caches_dtype_is_kept(learner):
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        k_cache = cache(4, 3, 2, 2, 4, dtype)
        got = learner.gather_k(k_cache, [0, 2], [2, 0], [1])
        check_equal(str(got.dtype), str(dtype), f"the dtype of gather_k on a {dtype} cache")
        check_equal(got, expected(k_cache, [0, 2], [2, 0], [1]), f"gather_k on a {dtype} cache")


def test_bad_page_tables_are_refused_by_name(learner):
    """The message names the value at fault; the numbers cannot be in it by accident."""
    k_cache = cache(5, 9, 4, 2, 8)
    cases = [
        (([0, 2, 3], [5, 0, 13], [4, 3]), 13, "page 13 of a 9-page cache"),
        (([0, 2, 3], [5, 0, -3], [4, 3]), -3, "page -3"),
        (([0, 2, 3], [5, 0, 1], [4, 7]), 7, "kv_last_page_len 7 on pages of 4"),
        (([0, 0, 1], [5], [3, 1]), 3, "kv_last_page_len 3 for a request without pages"),
        (([0, 5, 3], [5, 0, 1], [4, 1]), 5, "kv_indptr that decreases after 5"),
        (
            ([0, 2, 3], [5, 0, 1, 2, 6, 8], [4, 1]),
            6,
            "kv_indices of 6 pages for kv_indptr ending at 3",
        ),
        (([0, 2, 3, 3, 3], [4, 0, 1], [4, 1]), 5, "kv_indptr of 5 entries for 2 requests"),
    ]
    for (indptr, indices, last), bad, why in cases:
        what = f"gather_k(k_cache [9, 4, 2, 8], {indptr}, {indices}, {last})"
        error = check_raises(
            ValueError, learner.gather_k, k_cache, indptr, indices, last, what=what
        )
        check_names(error, bad, f"the error for {why}")
