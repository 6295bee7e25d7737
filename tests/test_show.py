"""minillm.notebook.show: the engine's code shown as highlighted Python in JupyterLab and on the
site."""

import pytest

from minillm.model import RMSNorm, Transformer, apply_rope, rope_cos_sin
from minillm.notebook.show import source


def test_a_function_is_shown_as_a_python_fenced_block_headed_by_its_file():
    shown = source(rope_cos_sin)._repr_markdown_()
    lines = shown.splitlines()
    assert lines[0] == "```python" and lines[-1] == "```"
    assert lines[1] == "# minillm/model.py"
    assert lines[2].startswith("def rope_cos_sin(")


def test_a_method_loses_its_class_indentation_and_names_its_class():
    shown = source(Transformer.forward)._repr_markdown_()
    assert "# minillm/model.py: Transformer.forward" in shown
    body = shown.splitlines()[2:-1]
    assert any(line.startswith("def forward(") for line in body)  # dedented to column 0


def test_several_objects_share_one_block_in_the_order_given():
    text = repr(source(rope_cos_sin, apply_rope))
    assert text.index("def rope_cos_sin(") < text.index("def apply_rope(")
    assert "class RMSNorm(nn.Module):" in repr(source(RMSNorm))


def test_backticks_in_the_code_never_close_the_fence(monkeypatch):
    import minillm.notebook.show as show

    monkeypatch.setattr(show, "_source_of", lambda obj: 'doc = """```python\\nx\\n```"""\n')
    shown = source(rope_cos_sin)._repr_markdown_()
    assert shown.startswith("````python\n") and shown.endswith("\n````\n")


def test_nothing_or_something_without_source_is_refused_by_name():
    with pytest.raises(ValueError, match="at least one"):
        source()
    with pytest.raises(ValueError, match="cannot show the source of 3"):
        source(3)


def test_cut_replaces_each_block_with_one_comment_at_its_indent():
    from minillm.notebook.show import cut

    text = "def f(x):\n    a = 1\n    if x:\n        b = 2\n        c = 3\n    return a\n"
    assert cut(text, [("if x", "c = 3", "later")]) == (
        "def f(x):\n    a = 1\n    # ... later\n    return a\n"
    )
    shown = cut(source(cut), [('"""`listing`', "line, replaced", "docstring")])
    assert "# ... docstring" in shown.text and "replaced by one" not in shown.text


def test_cut_refuses_a_block_that_is_not_there():
    import pytest

    from minillm.notebook.show import cut

    with pytest.raises(ValueError, match="no block"):
        cut("a = 1\n", [("b =", "b =", "x")])
