"""`python -m minillm ...`: the command line (demo, doctor, check, bench, serve, bench-serve)."""
