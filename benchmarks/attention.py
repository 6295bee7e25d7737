"""Decode attention on a GPU: chapter 11's Triton kernel vs the torch reference vs SDPA on a
padded batch.

    python benchmarks/attention.py                   # 1-64 requests, contexts 1K-32K, bf16
    python benchmarks/attention.py --quick           # batch sizes 1 and 64, contexts 1K and 32K
    python benchmarks/attention.py --peak-gbps 3350  # peak HBM GB/s, for a device not listed
    python benchmarks/attention.py --json out.json   # also save the rows
    python benchmarks/attention.py --mixed-steps 2000:0+64x4096  # one mixed step of your own

For each batch size B and context L (every request of the batch has the same context, so the
padded batch has no padding), one decode step of one layer's attention is timed five ways:

- `triton`: `triton_paged_attention`, one launch over the flat batch, K/V read through the block
  tables;
- `split`: `split_decode_attention`, the flash-decoding kernels (GQA heads packed, then the
  merge), in segments of the length `decode_segment` picks, or of 256 keys where it picks none;
- `unsplit`: the same segment kernel with one segment per context (GQA heads packed, no merge);
  the backend picks `split` or `unsplit` by `decode_segment` (the `backend` column), so the two
  columns time what that rule decides;
- `torch`: chapter 4's padded decode path (`PagedAttention.decode`: gather the blocks into
  buffers the cache keeps, zero the gathered rows past each context, then one
  `scaled_dot_product_attention` over strided views);
- `sdpa`: `torch.nn.functional.scaled_dot_product_attention` on K/V already laid out
  contiguously as [B, kv_heads, L, head_dim] (no gather: the best a dense cache could do).

Decode attention is memory-bound, so the number that matters is the achieved bandwidth: the
bytes it must read (every cached K and V, plus q and the output) over its time, as a fraction of
the device's peak.

Then mixed steps, the path chapter 11 builds first: a step that holds a prefill or a chunk
beside decodes (`--mixed-steps`; by default a 2,000-token prefill with 64 decodes of 4K, and a
512-token chunk after 4K cached with the same decodes), timed three ways:

- `triton`: `triton_paged_attention`, one launch for the whole step;
- `torch`: chapter 4's loop (`PagedAttention.varlen`: per request, gather its blocks, then one
  attention call);
- `sdpa`: the same loop over K/V already laid out contiguously per request (no gather), the
  causal mask aligned to the end of each context.

For these the script prints each one's time, achieved bandwidth and achieved TFLOPS (the
attention's operations: 4 x head_dim per query head and visible key).

Without CUDA the script says so and exits 0; `--cpu-smoke` runs tiny shapes of both kinds (two
decode steps, two mixed steps) on the CPU in Triton's interpreter, to exercise the code (its
times mean nothing). Timings are never asserted.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

# run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minillm.kernels import INSTALL_HINT, triton_available  # noqa: E402

# Public peak HBM bandwidths (bytes/s), by a substring of torch.cuda.get_device_name(); see
# docs/sources.md.
PEAK_BANDWIDTH = {
    "H200": 4.8e12,
    "H100 NVL": 3.9e12,
    "H100 PCIe": 2.0e12,
    "H100": 3.35e12,
    "A100-SXM4-80GB": 2.039e12,
    "A100 80GB PCIe": 1.935e12,
    "A100": 1.555e12,
    "L40S": 0.864e12,
}


def int_list(text: str) -> list[int]:
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"got {text!r}, expected comma-separated ints such as 1,8,64"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected ints >= 1")
    return values


# a 2,000-token prefill, then a 512-token chunk after 4,096 cached, each beside 64 decodes of 4K
DEFAULT_MIXED = "2000:0+64x4096;512:4096+64x4096"
SMOKE_MIXED = "20:0+3x40;8:40+3x40"  # --cpu-smoke: the same kinds of step, tiny


def mixed_steps(text: str) -> list[tuple[int, int, int, int]]:
    """'NEW:CACHED+BxL;...' -> [(new, cached, decodes, decode context), ...]."""
    if text.strip().lower() == "none":
        return []
    steps = []
    for part in text.split(";"):
        try:
            chunk, decodes = part.split("+")
            new, cached = (int(x) for x in chunk.split(":"))
            b, length = (int(x) for x in decodes.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"got {part!r}, expected NEW:CACHED+BxL such as 2000:0+64x4096"
            ) from None
        if new < 1 or cached < 0 or b < 0 or length < 1:
            raise argparse.ArgumentTypeError(
                f"got {part!r}: expected NEW >= 1, CACHED >= 0, B >= 0, L >= 1"
            )
        steps.append((new, cached, b, length))
    return steps


def parse(argv):
    p = argparse.ArgumentParser(
        prog="benchmarks/attention.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--batch-sizes", type=int_list, default=[1, 8, 64])
    p.add_argument("--contexts", type=int_list, default=[1024, 4096, 16384, 32768])
    p.add_argument("--num-heads", type=int, default=16, help="query heads (Qwen3-0.6B: 16)")
    p.add_argument("--kv-heads", type=int, default=8, help="KV heads (Qwen3-0.6B: 8)")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument(
        "--peak-gbps",
        type=float,
        default=None,
        help="the device's peak memory bandwidth in GB/s",
    )
    p.add_argument("--iters", type=int, default=20)
    p.add_argument(
        "--quick", action="store_true", help="batch sizes 1,64 and contexts 1024,32768 only"
    )
    p.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="tiny shapes on the CPU in Triton's interpreter",
    )
    p.add_argument(
        "--mixed-steps",
        type=mixed_steps,
        default=None,
        help="mixed steps, ';'-separated: NEW:CACHED (a prefill or chunk of NEW tokens after "
        "CACHED) + BxL (B decodes of context L), e.g. 2000:0+64x4096 (the default two: "
        f"{DEFAULT_MIXED!r}); 'none' for none",
    )
    p.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    args = p.parse_args(argv)
    if args.num_heads % args.kv_heads:
        p.error(f"--num-heads {args.num_heads} is not a multiple of --kv-heads {args.kv_heads}")
    if args.quick:
        args.batch_sizes, args.contexts = [1, 64], [1024, 32768]
    if args.cpu_smoke:
        args.batch_sizes, args.contexts, args.iters, args.dtype = [1, 3], [40], 1, "float32"
        args.num_heads, args.kv_heads, args.head_dim, args.block_size = 4, 2, 32, 8
        if args.mixed_steps is None:
            args.mixed_steps = mixed_steps(SMOKE_MIXED)
    if args.mixed_steps is None:
        args.mixed_steps = mixed_steps(DEFAULT_MIXED)
    return args


def timed(fn, iters: int, cuda: bool) -> float:
    """Median seconds of fn() over iters runs, after a warm-up run (which also compiles the
    kernel)."""
    fn()
    times = []
    for _ in range(iters):
        if cuda:
            start, end = (
                torch.cuda.Event(enable_timing=True),
                torch.cuda.Event(enable_timing=True),
            )
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            import time

            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def one_shape(B: int, L: int, args, device, dtype) -> dict:
    from minillm.kernels.split_decode import (
        BLOCK_N,
        SEGMENT,
        decode_segment,
        split_decode_attention,
    )
    from minillm.kernels.triton_attention import triton_paged_attention
    from minillm.kernels.triton_runtime import multiprocessors
    from minillm.paged import PagedAttention, PagedKVCache

    H, KV, hd, bs = args.num_heads, args.kv_heads, args.head_dim, args.block_size
    per_request = -(-L // bs)
    kv = PagedKVCache(1, B * per_request + 1, bs, KV, hd, dtype, device)
    kv.k[0].normal_(), kv.v[0].normal_()
    blocks = list(range(1, kv.num_blocks))
    random.Random(B * 100_003 + L).shuffle(blocks)  # scattered, as in a long-running engine
    tables = [blocks[i * per_request : (i + 1) * per_request] for i in range(B)]
    # checked once, like a step's metadata
    attn = PagedAttention(kv, tables, [L] * B, list(range(B + 1)))
    q = torch.randn(B, H, hd, device=device, dtype=dtype)
    scale = hd**-0.5
    seq_lens = torch.full((B,), L, dtype=torch.long, device=device)
    qsl = torch.arange(B + 1, dtype=torch.long, device=device)

    def run_triton():
        return triton_paged_attention(
            q, kv.k[0], kv.v[0], attn.block_tables, seq_lens, qsl, 1, scale
        )

    whole = -(-L // BLOCK_N) * BLOCK_N  # one segment per context, whole tiles
    # what the backend runs for this step: more than one segment per context is the split
    picked = decode_segment([L] * B, KV, multiprocessors(device))
    split = picked < L
    segment = picked if split else SEGMENT

    def run_split():
        return split_decode_attention(
            q, kv.k[0], kv.v[0], attn.block_tables, seq_lens, L, scale, segment
        )

    def run_unsplit():
        return split_decode_attention(
            q, kv.k[0], kv.v[0], attn.block_tables, seq_lens, L, scale, whole
        )

    def run_torch():
        return attn.decode(0, q, scale)

    dense = kv.k[0][attn.block_tables].flatten(1, 2)[:, :L]  # [B, L, KV, hd]
    k_dense = dense.permute(0, 2, 1, 3).contiguous()  # [B, KV, L, hd]
    v_dense = kv.v[0][attn.block_tables].flatten(1, 2)[:, :L].permute(0, 2, 1, 3).contiguous()
    q4 = q[:, :, None, :]  # [B, H, 1, hd]

    def run_sdpa():
        return F.scaled_dot_product_attention(
            q4, k_dense, v_dense, scale=scale, enable_gqa=True
        )

    want = run_torch().float()
    err_triton = max(
        (run_triton().float() - want).abs().max().item(),
        (run_split().float() - want).abs().max().item(),
        (run_unsplit().float() - want).abs().max().item(),
    )
    err_sdpa = (run_sdpa()[:, :, 0].float() - want).abs().max().item()
    cuda = device.type == "cuda"
    seconds = {
        name: timed(fn, args.iters, cuda)
        for name, fn in [
            ("triton", run_triton),
            ("split", run_split),
            ("unsplit", run_unsplit),
            ("torch", run_torch),
            ("sdpa", run_sdpa),
        ]
    }
    # K and V, then q and the output
    nbytes = 2 * B * L * KV * hd * kv.k[0].element_size() + 2 * q.numel() * q.element_size()
    return dict(
        batch=B,
        context=L,
        backend="split" if split else "unsplit",
        segment=segment,
        bytes=nbytes,
        seconds=seconds,
        err_triton=err_triton,
        err_sdpa=err_sdpa,
        gbps={name: nbytes / s / 1e9 for name, s in seconds.items()},
    )


def mixed_step(new: int, cached: int, B: int, L: int, args, device, dtype) -> dict:
    """One layer's attention for a step of one prefill or chunk (new tokens after cached ones)
    beside B decodes of context L: the one-launch kernel, the torch loop, the SDPA loop."""
    from minillm.kernels.triton_attention import triton_paged_attention
    from minillm.paged import PagedAttention, PagedKVCache

    H, KV, hd, bs = args.num_heads, args.kv_heads, args.head_dim, args.block_size
    seq_lens = [cached + new] + [L] * B
    query_lens = [new] + [1] * B
    need = [-(-n // bs) for n in seq_lens]
    kv = PagedKVCache(1, sum(need) + 1, bs, KV, hd, dtype, device)
    kv.k[0].normal_(), kv.v[0].normal_()
    blocks = list(range(1, kv.num_blocks))
    random.Random(new * 100_003 + B * 1_009 + L).shuffle(blocks)  # scattered
    tables = [blocks[sum(need[:i]) : sum(need[: i + 1])] for i in range(len(seq_lens))]
    qsl = [0]
    for n in query_lens:
        qsl.append(qsl[-1] + n)
    attn = PagedAttention(kv, tables, seq_lens, qsl)  # checked once, like a step's metadata
    q = torch.randn(qsl[-1], H, hd, device=device, dtype=dtype)
    scale = hd**-0.5
    lens_t = torch.tensor(seq_lens, dtype=torch.long, device=device)
    qsl_t = torch.tensor(qsl, dtype=torch.long, device=device)

    def run_triton():
        return triton_paged_attention(
            q, kv.k[0], kv.v[0], attn.block_tables, lens_t, qsl_t, max(query_lens), scale
        )

    def run_torch():
        return attn.varlen(0, q, scale)

    # each request's K/V laid out as [1, KV, len, hd], and its end-aligned causal mask
    dense = []
    for table, n, q_len in zip(tables, seq_lens, query_lens):
        k, v = kv.read(0, table, n)  # [n, KV, hd]
        mask = torch.ones(q_len, n, dtype=torch.bool, device=device).tril(n - q_len)
        dense.append(
            (k.transpose(0, 1)[None].contiguous(), v.transpose(0, 1)[None].contiguous(), mask)
        )
    out = torch.empty_like(q)

    def run_sdpa():
        for (k, v, mask), a, b in zip(dense, qsl, qsl[1:]):
            q4 = q[a:b].transpose(0, 1)[None]  # [1, H, q_len, hd]
            o = F.scaled_dot_product_attention(
                q4, k, v, attn_mask=mask, scale=scale, enable_gqa=True
            )
            out[a:b] = o[0].transpose(0, 1)
        return out

    want = run_torch().float()
    err_triton = (run_triton().float() - want).abs().max().item()
    err_sdpa = (run_sdpa().float() - want).abs().max().item()
    cuda = device.type == "cuda"
    seconds = {
        name: timed(fn, args.iters, cuda)
        for name, fn in [("triton", run_triton), ("torch", run_torch), ("sdpa", run_sdpa)]
    }
    item = kv.k[0].element_size()
    # every cached K and V once, q and the output
    nbytes = 2 * sum(seq_lens) * KV * hd * item + 2 * q.numel() * q.element_size()
    # keys each new token sees: token j of n new after c cached sees c + j + 1
    visible = sum(n * (s - n) + n * (n + 1) // 2 for s, n in zip(seq_lens, query_lens))
    flops = 4 * hd * H * visible  # q.k and p.v, a multiply and an add each
    return dict(
        step=f"{new}:{cached}+{B}x{L}",
        tokens=qsl[-1],
        bytes=nbytes,
        flops=flops,
        seconds=seconds,
        err_triton=err_triton,
        err_sdpa=err_sdpa,
        gbps={name: nbytes / t / 1e9 for name, t in seconds.items()},
        tflops={name: flops / t / 1e12 for name, t in seconds.items()},
    )


def main(argv=None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if not triton_available():
        print(f"benchmarks/attention.py needs triton: {INSTALL_HINT}")
        return 0
    if not torch.cuda.is_available() and not args.cpu_smoke:
        print(
            "benchmarks/attention.py measures GPU kernels, and torch sees no CUDA device here "
            "(torch.cuda.is_available() is False): nothing to measure. `--cpu-smoke` runs the "
            "code on tiny shapes in Triton's interpreter, without meaningful times."
        )
        return 0
    from minillm.kernels import interpreting, load_triton

    load_triton()
    device = torch.device("cpu" if args.cpu_smoke else "cuda")
    if args.cpu_smoke and not interpreting():
        print("--cpu-smoke needs Triton's interpreter: run it with TRITON_INTERPRET=1")
        return 2
    dtype = getattr(torch, args.dtype)
    name = "CPU (Triton interpreter)" if args.cpu_smoke else torch.cuda.get_device_name()
    peak = (
        args.peak_gbps * 1e9
        if args.peak_gbps
        else next((bw for key, bw in PEAK_BANDWIDTH.items() if key in name), None)
    )
    print(
        f"device: {name}; peak bandwidth: "
        f"{f'{peak / 1e12:.2f} TB/s' if peak else 'unknown (pass --peak-gbps)'}; "
        f"{args.dtype}, {args.num_heads} query / {args.kv_heads} KV heads of {args.head_dim}, "
        f"block size {args.block_size}"
    )
    names = ("triton", "split", "unsplit", "torch", "sdpa")
    head = (
        f"{'B':>3} {'context':>8} {'K/V MB':>8} | "
        + " ".join(f"{n:>9}" for n in names)
        + " (us) | "
        + " ".join(f"{n:>7}" for n in names)
        + f" (GB/s) | {'backend':>7} {'% peak':>6} | {'err':>7}"
    )
    print(head + "\n" + "-" * len(head))
    rows = []
    for B in args.batch_sizes:
        for L in args.contexts:
            # the cache, the gather's copy, the dense copy, and slack
            need = 4 * 2 * B * L * args.kv_heads * args.head_dim * dtype.itemsize
            if device.type == "cuda" and need > torch.cuda.mem_get_info()[0]:
                print(
                    f"{B:>3} {L:>8}  skipped: needs about {need / 2**30:.1f} GiB of free GPU "
                    "memory"
                )
                continue
            r = one_shape(B, L, args, device, dtype)
            rows.append(r)
            # the kernel the backend runs for this step, and its fraction of the peak
            frac = f"{r['backend']:>7} " + (
                f"{r['gbps'][r['backend']] * 1e9 / peak:6.1%}"
                if peak and not args.cpu_smoke
                else f"{'-':>6}"
            )
            print(
                f"{B:>3} {L:>8} {r['bytes'] / 1e6:>8.1f} | "
                + " ".join(f"{r['seconds'][n] * 1e6:>9.1f}" for n in names)
                + "      | "
                + " ".join(f"{r['gbps'][n]:>7.1f}" for n in names)
                + f"        | {frac} | {r['err_triton']:>7.1e}"
            )
            if device.type == "cuda":
                torch.cuda.empty_cache()
    mixed_rows = []
    if args.mixed_steps:
        names = ("triton", "torch", "sdpa")
        head = (
            f"{'mixed step (new:cached+BxL)':>28} {'tokens':>7} | "
            + " ".join(f"{n:>9}" for n in names)
            + " (us) | "
            + " ".join(f"{n:>7}" for n in names)
            + " (GB/s) | "
            + " ".join(f"{n:>6}" for n in names)
            + f" (TFLOPS) | {'err':>7}"
        )
        print("\n" + head + "\n" + "-" * len(head))
        for new, cached, B, L in args.mixed_steps:
            r = mixed_step(new, cached, B, L, args, device, dtype)
            mixed_rows.append(r)
            print(
                f"{r['step']:>28} {r['tokens']:>7} | "
                + " ".join(f"{r['seconds'][n] * 1e6:>9.1f}" for n in names)
                + "      | "
                + " ".join(f"{r['gbps'][n]:>7.1f}" for n in names)
                + "        | "
                + " ".join(f"{r['tflops'][n]:>6.2f}" for n in names)
                + f"          | {max(r['err_triton'], r['err_sdpa']):>7.1e}"
            )
            if device.type == "cuda":
                torch.cuda.empty_cache()
    if args.cpu_smoke:
        print("(CPU smoke run: the interpreter's times say nothing about a GPU)")
    if args.json:
        args.json.write_text(
            json.dumps(
                dict(
                    device=name,
                    peak_bytes_per_s=peak,
                    dtype=args.dtype,
                    rows=rows,
                    mixed_rows=mixed_rows,
                ),
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
