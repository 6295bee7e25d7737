"""kernels/ — chapter 11: the mixed step's attention and K/V cache write as Triton kernels.

Triton is optional (`pip install -e '.[kernels]'`). Importing this package never imports triton;
the modules that hold kernels (`triton_attention`, `cache_write`) do, through `load_triton()`.

Where the kernels run. With a CUDA GPU, Triton compiles them. Without one, they run in Triton's
interpreter, which executes each program in Python with numpy on CPU tensors. Triton decides
which when a function is *defined* (`@triton.jit` reads TRITON_INTERPRET), its own helpers
(tl.cdiv, the reductions) included, which it defines when first imported; and torch imports
triton by itself (torch._dynamo). So importing minillm sets TRITON_INTERPRET=1
(`choose_interpreter()`), but only on a machine without CUDA, with triton installed, and only
when the variable is unset: an explicit TRITON_INTERPRET=0 or =1 always wins.
Setting it in os.environ also hands it to child processes (the exercise judge's sandboxed
learner inherits it).
"""

from __future__ import annotations

from minillm.kernels.triton_runtime import (
    INSTALL_HINT,
    interpreting,
    load_triton,
    triton_available,
)

__all__ = [
    "INSTALL_HINT",
    "interpreting",
    "load_triton",
    "triton_available",
    "attention_backend_class",
]

ATTENTION_BACKENDS = ("torch", "triton")


def attention_backend_class(name):
    """The class the runner builds each step's attention backend from: "torch" (chapter 4's
    PagedAttention)
    or "triton" (this chapter's kernels). Anything else is refused with the accepted names."""
    if name not in ATTENTION_BACKENDS:
        raise ValueError(
            f"attention_backend is {name!r}: expected one of "
            f"{', '.join(map(repr, ATTENTION_BACKENDS))}"
        )
    if name == "torch":
        from minillm.paged import PagedAttention

        return PagedAttention
    # says how to install triton when it is missing, and picks the interpreter without CUDA
    load_triton()
    from minillm.kernels.backend import TritonAttention

    return TritonAttention
