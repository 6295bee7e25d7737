"""minillm: the LLM inference engine that the book's chapters build, one module per idea.

Part one, a module per chapter:
model.py      ch. 1  a Qwen3 decoder from scratch
kv_cache.py   ch. 2  a contiguous KV cache, prefill vs decode, greedy generate
slots.py      ch. 3  many requests in fixed KV slots
paged.py      ch. 4  BlockPool, PagedKVCache, slot_mapping_for, paged_attention
runner.py     ch. 5  BatchInput, build_batch, ModelRunner: one mixed prefill/decode forward
scheduler.py  ch. 6  continuous batching with a token budget (with sampling.py and engine.py)

Later chapters, a subpackage each: prefix_caching/ (7), serving/ (8), spec_decode/ (9),
parallel/ (10), kernels/ (11), structured_output/ (12). The machinery that serves the book:
cli/, bench/, checks/, notebook/, checkpoints.py.
"""

import os

# No model hub, ever: every model comes from a local folder (see checkpoints.py).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

# Triton's interpreter on a CPU-only machine, chosen before torch itself first imports triton
# (see kernels/triton_runtime.py).
from minillm.kernels.triton_runtime import choose_interpreter  # noqa: E402

choose_interpreter()

__version__ = "0.1.0"
