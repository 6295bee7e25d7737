"""`python -m minillm ...`: the command line (demo, doctor, check, bench, serve,
bench-serve)."""

from minillm.cli.commands import main

__all__ = ["main"]
