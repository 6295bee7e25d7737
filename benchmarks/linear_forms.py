"""How fast is one projection on this CPU, computed each way, for 1 to 16 rows?

    python benchmarks/linear_forms.py              # the bench model's shapes, 1 and 2 threads
    python benchmarks/linear_forms.py --threads 1

`minillm.model.linear` is the one place that picks the form a projection takes on the CPU; this
script is the measurement behind its choice (oneDNN's linear on a weight packed once). It
prints, for each weight shape of the bench model and each row count, the time of every form and
the bandwidth it reaches (minillm/bench/forms.py); `python -m minillm bench` prints the same
table for the output layer and an MLP projection. Timings are never asserted.
"""

from __future__ import annotations

import argparse

from minillm.bench.forms import form_times, print_forms

SHAPES = {  # (out, in) of the bench model (BENCH_CONFIG in minillm/bench/common.py)
    "lm_head 32768x768": (32_768, 768),
    "gate/up 2304x768": (2304, 768),
    "down 768x2304": (768, 2304),
    "q/o 768x768": (768, 768),
}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", default="1,2,5,8,16", help="comma-separated row counts")
    p.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    p.add_argument(
        "--budget", type=float, default=0.2, help="seconds of timing per form and shape"
    )
    args = p.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    print_forms(form_times(SHAPES, rows, threads, args.budget))


if __name__ == "__main__":
    main()
