"""The parity checks behind `python -m minillm check`, and the external reference."""
