"""Wrong: masks only the columns past ROW, not the positions past the request's length: the
last tile of a request, and every tile of a shorter one, writes rows that are not its own.

Caught by: test_the_kernel_writes_only_each_requests_rows.
"""

import torch

from minillm.kernels import load_triton

triton = load_triton()  # without a GPU this selects Triton's interpreter first
import triton.language as tl  # noqa: E402

TILE = 16  # positions per program in gather_k


@triton.jit
def gather_k_kernel(
    k_cache_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    last_page_len_ptr,
    out_start_ptr,
    out_ptr,
    stride_page,
    stride_offset,
    ROW: tl.constexpr,
    BLOCK_ROW: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    TILE: tl.constexpr,
):
    """Program (b, t) copies positions t * TILE .. t * TILE + TILE - 1 of request b (those below
    its length), each a row of ROW numbers (all heads), into out from row out_start[b] on."""
    b = tl.program_id(0)
    t = tl.program_id(1)
    first_page = tl.load(kv_indptr_ptr + b)  # the request's pages: kv_indices[first_page:...]
    num_pages = tl.load(kv_indptr_ptr + b + 1) - first_page
    # every page full but the last; a request without pages has no tokens
    seq_len = tl.where(
        num_pages > 0, (num_pages - 1) * PAGE_SIZE + tl.load(last_page_len_ptr + b), 0
    )
    pos = t * TILE + tl.arange(0, TILE)  # [TILE] positions in the request
    pos_ok = pos < seq_len  # the grid is sized for the longest request
    cols = tl.arange(0, BLOCK_ROW)  # [BLOCK_ROW] a power of two >= ROW
    ok = (pos[:, None] >= 0) & (cols[None, :] < ROW)  # [TILE, BLOCK_ROW]
    # two lookups: the request's slice of kv_indices, then the page of each position
    page = tl.load(kv_indices_ptr + first_page + pos // PAGE_SIZE)
    src = page * stride_page + (pos % PAGE_SIZE) * stride_offset  # [TILE]
    rows = tl.load(k_cache_ptr + src[:, None] + cols[None, :], mask=ok)  # [TILE, BLOCK_ROW]
    dst = tl.load(out_start_ptr + b) + pos  # [TILE] rows of out
    tl.store(out_ptr + dst[:, None] * ROW + cols[None, :], rows, mask=ok)


def gather_k(
    k_cache: torch.Tensor,
    kv_indptr: list[int],
    kv_indices: list[int],
    kv_last_page_len: list[int],
) -> torch.Tensor:
    """k_cache [num_pages, page_size, kv_heads, head_dim] -> out [total_tokens, kv_heads,
    head_dim], the requests' K one after another, by the kernel."""
    num_pages, page_size, kv_heads, head_dim = k_cache.shape
    B = len(kv_last_page_len)
    if len(kv_indptr) != B + 1:
        raise ValueError(
            f"kv_indptr has {len(kv_indptr)} entries: expected {B + 1}, one more than "
            f"kv_last_page_len's {B}"
        )
    if kv_indptr[0] != 0:
        raise ValueError(f"kv_indptr[0] is {kv_indptr[0]}: expected 0")
    for b in range(B):
        if kv_indptr[b + 1] < kv_indptr[b]:
            raise ValueError(
                f"kv_indptr[{b + 1}] is {kv_indptr[b + 1]}, below kv_indptr[{b}] = "
                f"{kv_indptr[b]}: expected offsets that never decrease"
            )
    if kv_indptr[-1] != len(kv_indices):
        raise ValueError(
            f"kv_indptr ends at {kv_indptr[-1]}, but kv_indices has {len(kv_indices)} pages"
        )
    seq_lens = []
    for b, last in enumerate(kv_last_page_len):
        pages = kv_indptr[b + 1] - kv_indptr[b]
        low, high = (1, page_size) if pages else (0, 0)
        if not low <= last <= high:
            raise ValueError(
                f"request {b} has {pages} pages and kv_last_page_len {last}: expected "
                f"{low} to {high}"
            )
        seq_lens.append((pages - 1) * page_size + last if pages else 0)
    bad = [p for p in kv_indices if not 0 <= p < num_pages]
    if bad:
        raise ValueError(f"kv_indices lists page {bad[0]}: expected 0 <= page < {num_pages}")
    out = torch.empty(sum(seq_lens), kv_heads, head_dim, dtype=k_cache.dtype)
    if not out.shape[0]:
        return out
    starts = [sum(seq_lens[:b]) for b in range(B)]
    row = kv_heads * head_dim
    gather_k_kernel[(B, triton.cdiv(max(seq_lens), TILE))](
        k_cache,
        torch.tensor(kv_indptr, dtype=torch.long),
        torch.tensor(kv_indices if kv_indices else [0], dtype=torch.long),
        torch.tensor(kv_last_page_len, dtype=torch.long),
        torch.tensor(starts, dtype=torch.long),
        out,
        k_cache.stride(0),
        k_cache.stride(1),
        ROW=row,
        BLOCK_ROW=triton.next_power_of_2(row),
        PAGE_SIZE=page_size,
        TILE=TILE,
    )
    return out
