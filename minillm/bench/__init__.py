"""The benchmarks behind `python -m minillm bench` and `bench-serve` (never timed asserts)."""
