"""Chapter 10, tensor parallelism: every layer split across ranks."""
