"""Throughput vs concurrency on the bench model, saved where chapter 6's notebook reads it.

    python benchmarks/throughput.py               # the full run, saved to results/cpu.json
    python benchmarks/throughput.py --repeats 1   # any `python -m minillm bench` option works

The same code as `python -m minillm bench` (minillm/bench/throughput.py); this script only picks
the output file. Timings are never asserted: run it on a quiet machine and read the printed
table.
"""

import sys
from pathlib import Path

from minillm.bench.throughput import main

if __name__ == "__main__":
    out = Path(__file__).resolve().parent / "results" / "cpu.json"
    save = (
        [] if "--quick" in sys.argv else ["--save", str(out)]
    )  # a smoke run must not overwrite the result
    sys.exit(main([*save, *sys.argv[1:]]))
