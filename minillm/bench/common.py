"""bench/common.py — what every benchmark shares: the bench model, the machine, the options'
defaults."""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

import torch

from minillm.checkpoints import cache_dir, ensure_checkpoint
from minillm.cli.args import int_arg, writable_file
from minillm.paged import DEFAULT_BLOCK_SIZE

# The bench model: Qwen3's layer recipe (GQA with 12 query / 4 KV heads of 64, QK-norm, SwiGLU,
# tied head) at about a tenth of Qwen3-0.6B: 3/4 of its width, 6 of its 28 layers, a 32K
# vocabulary. Its 66M parameters (265 MB in float32) are far beyond the CPU caches (32 MB of L3
# here), so every forward streams all weights from memory, as decode does on a real model, and
# the engine's Python work per step (well under a millisecond) is small beside it. Any bigger
# and the bench would no longer run in minutes. The
# 32K vocabulary keeps the output layer at about a third of the weights, as in Qwen3-0.6B (the
# real 151,936 would make it three quarters); the bench needs no tokenizer, as its prompts are
# token ids.
BENCH_CONFIG = dict(
    vocab_size=32_768,
    hidden_size=768,
    intermediate_size=2304,
    num_hidden_layers=6,
    num_attention_heads=12,
    num_key_value_heads=4,
    head_dim=64,
    tie_word_embeddings=True,
    max_position_embeddings=4096,
)
BENCH_SEED = 2027
BENCH_NAME = "qwen3-bench-v1"  # bump the suffix whenever BENCH_CONFIG changes

BLOCK_SIZE = DEFAULT_BLOCK_SIZE


def bench_model_path() -> Path:
    return ensure_checkpoint(
        cache_dir() / BENCH_NAME, BENCH_CONFIG, seed=BENCH_SEED, with_tokenizer=False
    )


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return dict(
        cpu=cpu,
        cores=os.cpu_count(),
        torch_threads=torch.get_num_threads(),
        torch=torch.__version__,
        python=platform.python_version(),
        system=platform.system(),
    )


def fill_defaults(args: argparse.Namespace, quick: dict, full: dict) -> argparse.Namespace:
    """--quick fills in only the options the reader did not pass; a full run fills the rest."""
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def model_path(args: argparse.Namespace) -> Path:
    """--model if given; else the tiny default model for --quick, the generated bench model
    otherwise."""
    if args.model:
        return Path(args.model)
    if args.quick:
        from minillm.checkpoints import default_model_path

        return default_model_path()
    return bench_model_path()


def load_average() -> float | None:
    """The 1-minute load average: above the core count, other programs were competing for the
    CPU."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options every benchmark run takes: threads, seed, where to save, and --quick."""
    p.add_argument(
        "--threads",
        type=int_arg(min=1),
        default=None,
        help="torch CPU threads (default: torch's choice)",
    )
    p.add_argument("--seed", type=int_arg(min=0), default=0)
    p.add_argument(
        "--save",
        type=writable_file,
        default=None,
        help="write the results as JSON to this path (checked first)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a seconds-long smoke run on the tiny default model",
    )
