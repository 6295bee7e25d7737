"""Decode attention on a GPU: chapter 11's Triton kernel vs the torch reference vs SDPA on a
padded batch.

    python benchmarks/attention.py                   # 1-64 requests, contexts 1K-32K, bf16
    python benchmarks/attention.py --quick           # batch sizes 1 and 64, contexts 1K and 32K
    python benchmarks/attention.py --peak-gbps 3350  # peak HBM GB/s, for a device not listed
    python benchmarks/attention.py --json out.json   # also save the rows

For each batch size B and context L (every request of the batch has the same context, so the
padded batch has no padding), one decode step of one layer's attention is timed four ways:

- `triton`: `triton_paged_attention`, one launch over the flat batch, K/V read through the block
  tables;
- `split`: `split_decode_attention`, the flash-decoding kernels (GQA heads packed, then the
  merge), in segments of the length `decode_segment` picks, or of 256 keys where it picks none;
- `unsplit`: the same segment kernel with one segment per context (GQA heads packed, no merge);
  the backend picks `split` or `unsplit` by `decode_segment` (the `backend` column), so the two
  columns time what that rule decides;
- `torch`: chapter 4's padded decode path (`PagedAttention.decode`: gather the blocks, then
  matmuls);
- `sdpa`: `torch.nn.functional.scaled_dot_product_attention` on K/V already laid out
  contiguously as [B, kv_heads, L, head_dim] (no gather: the best a dense cache could do).

Decode attention is memory-bound, so the number that matters is the achieved bandwidth: the
bytes it must read (every cached K and V, plus q and the output) over its time, as a fraction of
the device's peak. Without CUDA the script says so and exits 0; `--cpu-smoke` runs two tiny
shapes on the CPU in Triton's interpreter, to exercise the code (its times mean nothing).
Timings are never asserted.
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
    p.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    args = p.parse_args(argv)
    if args.num_heads % args.kv_heads:
        p.error(f"--num-heads {args.num_heads} is not a multiple of --kv-heads {args.kv_heads}")
    if args.quick:
        args.batch_sizes, args.contexts = [1, 64], [1024, 32768]
    if args.cpu_smoke:
        args.batch_sizes, args.contexts, args.iters, args.dtype = [1, 3], [40], 1, "float32"
        args.num_heads, args.kv_heads, args.head_dim, args.block_size = 4, 2, 32, 8
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
    if args.cpu_smoke:
        print("(CPU smoke run: the interpreter's times say nothing about a GPU)")
    if args.json:
        args.json.write_text(
            json.dumps(
                dict(device=name, peak_bytes_per_s=peak, dtype=args.dtype, rows=rows), indent=1
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
