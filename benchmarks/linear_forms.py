"""How fast is one projection on this CPU, computed each way, for 1 to 16 rows?

    python benchmarks/linear_forms.py                 # the bench model's shapes, torch's thread count
    python benchmarks/linear_forms.py --threads 1

`minillm.model.linear` is the one place that picks the form a projection takes on the CPU; this
script is the measurement behind its rule. It prints, for each weight shape of the bench model and
each row count, the time of every form and the bandwidth it reaches (weight bytes / time: a skinny
product is bound by reading the weight, so GB/s is the number to compare with the machine's
streaming bandwidth). Timings are never asserted; a busy machine only makes them noisy.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from minillm.model import linear

FORMS = {
    "F.linear": lambda x, w: F.linear(x, w),
    "x @ w.T": lambda x, w: x @ w.T,
    "(w @ x.T).T": lambda x, w: (w @ x.T).T,
    "torch.mv (1 row)": lambda x, w: torch.mv(w, x[0])[None] if x.shape[0] == 1 else None,
    "1 row sent as 2": lambda x, w: (w @ x.expand(2, -1).T).T[:1] if x.shape[0] == 1 else None,
    "model.linear": lambda x, w: linear(x, w),
}
SHAPES = {  # (out, in) of the bench model (minillm/bench/throughput.py BENCH_CONFIG)
    "lm_head 32768x768": (32_768, 768),
    "gate/up 2304x768": (2304, 768),
    "down 768x2304": (768, 2304),
    "q/o 768x768": (768, 768),
}


def best_seconds(fn, x, w, budget_s: float) -> float:
    fn(x, w)  # warm-up
    best, spent, n = float("inf"), 0.0, 0
    while spent < budget_s or n < 3:
        t = time.perf_counter()
        fn(x, w)
        dt = time.perf_counter() - t
        best, spent, n = min(best, dt), spent + dt, n + 1
    return best


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", default="1,2,4,8,16", help="comma-separated row counts")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--budget", type=float, default=0.2, help="seconds of timing per form and shape")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [int(r) for r in args.rows.split(",")]
    print(f"{torch.get_num_threads()} torch threads; best of repeated calls; GB/s = weight bytes / time")
    torch.manual_seed(0)
    for name, (out, inp) in SHAPES.items():
        w = torch.randn(out, inp)
        gb = w.numel() * w.element_size() / 1e9
        print(f"\n{name} ({gb * 1e3:.0f} MB)")
        print(f"{'rows':>4} | " + " | ".join(f"{f:>18}" for f in FORMS))
        for r in rows:
            x = torch.randn(r, inp)
            cells = []
            for f, fn in FORMS.items():
                if fn(x, w) is None:
                    cells.append(f"{'-':>18}")
                    continue
                assert torch.allclose(fn(x, w), F.linear(x, w), rtol=1e-4, atol=1e-3), f
                s = best_seconds(fn, x, w, args.budget)
                cells.append(f"{s * 1e3:7.3f} ms {gb / s:3.0f} GB/s")
            print(f"{r:>4} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
