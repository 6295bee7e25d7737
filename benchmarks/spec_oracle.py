"""Chapter 9's oracle sweep: speculation's verify side alone, measured against the formula.

    python benchmarks/spec_oracle.py --save benchmarks/results/spec_oracle_cpu.json

On the bench model (minillm/bench/common.py), for batch sizes 1 and 8: plain greedy decoding,
then an oracle proposer (minillm/spec_decode/oracle.py: the greedy continuation, each token
corrupted with probability 1 - alpha, proposed at no cost) over a grid of alpha and k, and the
target as its own draft at k = 4 (every proposal accepted, each costing a target forward). Every
run's tokens must equal plain decoding's. Prints measured and predicted speedups, the measured
tokens per verify over the formula's E(alpha, k), and the scatter of the plain runs each
speculative run is timed against (minillm/bench/spec_sweep.py); the notebook reads the saved
JSON, which also holds every run's target forwards by kind.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from minillm.bench.common import bench_model_path, load_average, machine
from minillm.bench.spec_sweep import print_rows, sweep
from minillm.model import Transformer

ALPHAS = (0.0, 0.6, 0.8, 0.9, 1.0)
KS = (2, 4, 8)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="pairs of runs per row")
    p.add_argument("--save", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = Transformer.from_pretrained(bench_model_path())
    before, t = load_average(), time.perf_counter()
    rows = sweep(
        model, ALPHAS, KS, (1, 8), max_tokens=args.max_tokens, draft_k=4, repeats=args.repeats
    )
    print_rows(rows)
    after = load_average()
    print(f"{time.perf_counter() - t:.0f} s; load average {before} before, {after} after")
    if args.save:
        saved = dict(
            machine=dict(machine(), load_average_before=before, load_average_after=after),
            workload=dict(
                max_tokens=args.max_tokens,
                alphas=ALPHAS,
                ks=KS,
                batch_sizes=[1, 8],
                repeats=args.repeats,
            ),
            rows=rows,
        )
        Path(args.save).write_text(json.dumps(saved, indent=2) + "\n")
        print(f"saved {args.save}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
