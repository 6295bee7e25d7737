"""Prefix caching off vs on, on requests sharing a 256-token system prompt, saved where chapter
7 reads it.

    python benchmarks/shared_prefix.py              # the full run, into results/
    python benchmarks/shared_prefix.py --repeats 1  # any `bench --workload shared-prefix` flag

The same code as `python -m minillm bench --workload shared-prefix` (minillm/bench/prefix.py);
this script only picks the output file. Timings are never asserted: run it on a quiet machine
and read the printed table.
"""

import sys
from pathlib import Path

from minillm.bench.prefix import main

if __name__ == "__main__":
    out = Path(__file__).resolve().parent / "results" / "shared_prefix_cpu.json"
    save = (
        [] if "--quick" in sys.argv else ["--save", str(out)]
    )  # a smoke run must not overwrite the result
    sys.exit(main([*save, *sys.argv[1:]]))
