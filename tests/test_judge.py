"""Tests of practice/judge.py, run as the reader runs it: a command line in a subprocess.

Most use the pure-Python exercises (padding-waste, kv-bytes-per-token) so each call takes a
second or two; `make test` runs the full `python practice/judge.py check` separately. The
reader's workspace is a temp folder ($MINILLM_PRACTICE_WORKSPACE), never practice/workspace/.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
JUDGE = ROOT / "practice" / "judge.py"
PROBLEMS = ROOT / "practice" / "problems"


@pytest.fixture
def workspace(tmp_path):
    return tmp_path / "workspace"


@pytest.fixture
def judge(workspace):
    def run(*args, timeout=300) -> subprocess.CompletedProcess:
        env = dict(os.environ, MINILLM_PRACTICE_WORKSPACE=str(workspace), NO_COLOR="1")
        return subprocess.run(
            [sys.executable, str(JUDGE), *map(str, args)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


def write(tmp_path, name, source) -> Path:
    path = tmp_path / name
    path.write_text(source)
    return path


def loop_lines(source: str, name: str) -> tuple[str, str]:
    """The two places a signal can find the endless loop below: its condition or its body."""
    line = source.splitlines().index("    while n < 10:") + 1
    return f"at {name} line {line}: while n < 10:", f"at {name} line {line + 1}: pass"


def solution_with(slug, old, new) -> str:
    source = (PROBLEMS / slug / "solution.py").read_text()
    assert old in source, f"the mutation {old!r} no longer applies to {slug}/solution.py"
    return source.replace(old, new, 1)


def test_check_passes_on_a_subset_and_verifies_the_tree(judge):
    result = judge("check", "padding-waste", "kv-bytes-per-token", "9")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All 3 exercises are consistent" in result.stdout
    assert "slot-mapping" in result.stdout
    assert re.search(
        r"wrong +\d+/\d+ +fail", result.stdout
    )  # the wrong answers ran, and failed
    assert (
        "Tree verified: the" in result.stdout
        and "byte-identical after the run" in result.stdout
    )


def test_list_shows_every_exercise_by_chapter(judge):
    result = judge()
    assert result.returncode == 0, result.stderr
    slugs = sorted(p.parent.name for p in PROBLEMS.glob("*/problem.md"))
    assert len(slugs) >= 14
    for slug in slugs:
        assert slug in result.stdout
    for chapter in [
        "01_mini_llm",
        "02_kv_cache",
        "03_kv_slots",
        "04_paged_kv_cache",
        "05_varlen_batching",
    ]:
        assert chapter in result.stdout
    assert result.stdout.count("not started") == len(slugs)


def test_start_by_number_copies_the_starter_and_shows_the_task(judge, workspace):
    number = next(
        line.split()[0]
        for line in judge("list").stdout.splitlines()
        if " padding-waste " in line
    )
    result = judge("start", number)
    assert result.returncode == 0, result.stderr
    assert "Padded vs packed layouts" in result.stdout
    assert "## Hints" not in result.stdout  # hints wait for `hint`
    copied = workspace / "padding-waste.py"
    assert copied.read_text() == (PROBLEMS / "padding-waste" / "starter.py").read_text()
    assert "started" in judge("list").stdout


def test_start_does_not_overwrite_the_readers_work(judge, workspace):
    judge("start", "padding-waste")
    mine = workspace / "padding-waste.py"
    mine.write_text("# my own work\n")
    result = judge("start", "padding-waste")
    assert result.returncode == 0
    assert "already exists" in result.stdout
    assert mine.read_text() == "# my own work\n"


def test_hint_and_solution_accept_numbers(judge):
    hint = judge("hint", "1")
    assert hint.returncode == 0 and "Hints for #1 rmsnorm" in hint.stdout
    solution = judge("solution", "rmsnorm")
    assert solution.returncode == 0 and "def rms_norm" in solution.stdout


def test_unknown_id_is_a_usage_error(judge):
    result = judge("start", "no-such-exercise")
    assert result.returncode == 2
    assert "is not an exercise" in result.stderr and "rmsnorm" in result.stderr
    assert judge("start", "999").returncode == 2


def test_testing_before_start_says_how_to_start(judge):
    result = judge("test", "padding-waste")
    assert result.returncode == 2
    assert "start padding-waste" in result.stderr


def test_starter_is_reported_as_not_implemented(judge):
    judge("start", "padding-waste")
    result = judge("test", "padding-waste")
    assert result.returncode == 1
    assert "Nothing implemented yet" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_reference_solution_passes_and_is_recorded(judge, workspace):
    judge("start", "kv-bytes-per-token")
    (workspace / "kv-bytes-per-token.py").write_text(
        (PROBLEMS / "kv-bytes-per-token" / "solution.py").read_text()
    )
    result = judge("test", "kv-bytes-per-token")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"All \d+ tests pass", result.stdout)
    listed = next(
        line for line in judge("list").stdout.splitlines() if " kv-bytes-per-token " in line
    )
    assert listed.rstrip().endswith("passed")


def test_wrong_solution_fails_with_the_test_named(judge, tmp_path):
    wrong = solution_with(
        "padding-waste",
        "return 1 - sum(query_lens) / padded_tokens(query_lens)",
        "return padded_tokens(query_lens) / sum(query_lens) - 1",
    )
    result = judge("test", "padding-waste", write(tmp_path, "wrong.py", wrong))
    assert result.returncode == 1
    out = result.stdout
    assert "FAIL  test_waste_is_a_fraction_of_the_padded_work" in out
    assert "expected 0.333333" in out and "got      0.5" in out  # expected vs got
    assert "hint: [3, 1] pads to 6 tokens" in out
    assert "PASS  test_pad_fills_on_the_right" in out
    assert "Traceback" not in out + result.stderr


def test_endless_loop_times_out_with_a_clear_message(judge, tmp_path):
    looping = solution_with(
        "kv-bytes-per-token",
        "    return 2 * layers * kv_heads_per_gpu",
        "    n = 0\n    while n < 10:\n        pass\n    return 2 * layers * kv_heads_per_gpu",
    )
    result = judge(
        "test",
        "kv-bytes-per-token",
        write(tmp_path, "loop.py", looping),
        "--timeout",
        "2",
        timeout=120,
    )
    assert result.returncode == 1
    out = result.stdout
    assert "TIME  test_counts_keys_and_values" in out
    assert "did not finish within 2 s" in out and "endless loop" in out
    # where the reader's code was stuck: the loop's condition or its body, wherever the signal
    # found it
    assert any(where in out for where in loop_lines(looping, "loop.py")), out
    assert (
        "not run" in out
    )  # the judge stops at the first time-out instead of waiting for every test


def test_endless_loop_is_located_after_much_stderr_and_beside_another_thread(judge, tmp_path):
    # 30 000 chars on stderr fill the grader's kept tail; a second thread of the reader's file
    # sleeps: the stack the judge shows is still the looping one
    looping = solution_with(
        "kv-bytes-per-token",
        "    return 2 * layers * kv_heads_per_gpu",
        "    n = 0\n    while n < 10:\n        pass\n    return 2 * layers * kv_heads_per_gpu",
    )
    looping += (
        "\nimport sys, threading, time\nsys.stderr.write('noise ' * 5000)\n"
        "threading.Thread(target=lambda: time.sleep(60), daemon=True).start()\n"
    )
    result = judge(
        "test",
        "kv-bytes-per-token",
        write(tmp_path, "noisy.py", looping),
        "--timeout",
        "2",
        timeout=120,
    )
    assert result.returncode == 1
    assert "TIME  test_counts_keys_and_values" in result.stdout
    out = result.stdout
    assert any(where in out for where in loop_lines(looping, "noisy.py")), out


def test_syntax_error_is_reported(judge, tmp_path):
    broken = write(
        tmp_path,
        "broken.py",
        "def padded_tokens(query_lens):\n    return len(query_lens * max(query_lens)\n",
    )
    result = judge("test", "padding-waste", broken)
    assert result.returncode == 1
    assert "Python cannot read your file" in result.stdout
    assert "line 2" in result.stdout and "was never closed" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_import_error_is_reported(judge, tmp_path):
    broken = write(
        tmp_path,
        "imports.py",
        "import numpyy\n\ndef padded_tokens(query_lens):\n    return 0\n",
    )
    result = judge("test", "padding-waste", broken)
    assert result.returncode == 1
    assert "imports something that cannot be found" in result.stdout
    assert "No module named 'numpyy'" in result.stdout and "line 1" in result.stdout


def test_exception_in_the_readers_code_names_the_line_and_the_call(judge, tmp_path):
    crashing = solution_with(
        "padding-waste",
        "    return 1 - sum(query_lens) / padded_tokens(query_lens)",
        "    return 1 - sum(query_lens) / 0",
    )
    result = judge("test", "padding-waste", write(tmp_path, "crash.py", crashing))
    assert result.returncode == 1
    assert (
        "padding_waste([3, 1]) was expected to succeed, but your code raised "
        "ZeroDivisionError: division by zero"
    ) in result.stdout
    assert (
        "crash.py line" in result.stdout and "return 1 - sum(query_lens) / 0" in result.stdout
    )


def test_an_argument_changed_in_place_is_named(judge, tmp_path):
    mutating = solution_with(
        "padding-waste",
        "    return [list(t) + [pad_id] * (width - len(t)) for t in token_lists]",
        "    for t in token_lists:\n        t += [pad_id] * (width - len(t))\n    return "
        "token_lists",
    )
    result = judge("test", "padding-waste", write(tmp_path, "mutating.py", mutating))
    assert result.returncode == 1
    assert "FAIL  test_pad_fills_on_the_right" in result.stdout
    assert "changed its argument `token_lists` in place" in result.stdout


def test_printing_is_shown_with_the_failure(judge, tmp_path):
    noisy = solution_with(
        "padding-waste",
        "    return 1 - sum(query_lens) / padded_tokens(query_lens)",
        "    print('lens are', query_lens)\n    return 0.5",
    )
    result = judge("test", "padding-waste", write(tmp_path, "noisy.py", noisy))
    assert "your code printed: lens are [3, 1]" in result.stdout


def test_missing_function_is_named(judge, tmp_path):
    renamed = solution_with("padding-waste", "def padding_waste(", "def waste(")
    result = judge("test", "padding-waste", write(tmp_path, "renamed.py", renamed))
    assert result.returncode == 1
    assert "your file has no `padding_waste`" in result.stdout


def test_doctor_says_what_runs_here(judge):
    result = judge("doctor")
    assert result.returncode == 0, result.stderr
    assert "torch" in result.stdout and "cuda" in result.stdout
    assert "exercises run on this machine" in result.stdout
    assert re.search(
        r"^sandbox +(namespaces: |a separate process only)", result.stdout, re.MULTILINE
    )


def test_front_matter_is_read_by_one_parser_for_the_judge_and_the_site():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "chapters_hook", ROOT / "docs" / "hooks" / "chapters.py"
    )
    chapters = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(chapters)
    sys.path.insert(0, str(ROOT / "practice" / "harness"))
    try:
        from exercises import load_exercises
    finally:
        sys.path.remove(str(ROOT / "practice" / "harness"))
    site = {p["slug"]: p for p in chapters.read_problems(ROOT)}
    judged = load_exercises()
    assert sorted(site) == sorted(e.slug for e in judged)
    for ex in judged:
        assert (
            site[ex.slug]["title"],
            site[ex.slug]["chapter"],
            site[ex.slug]["requires"],
        ) == (ex.title, ex.chapter, ex.requires)
    with pytest.raises(ValueError, match="mapping"):  # one parser, so one set of errors as well
        chapters.problem_md_parser.split_front_matter("---\n- a list\n---\n")


@pytest.fixture(scope="module")
def full_check():
    """One `judge.py check -v` over every exercise: solutions, starters and every wrong
    answer."""
    env = dict(os.environ, NO_COLOR="1")
    return subprocess.run(
        [sys.executable, str(JUDGE), "check", "-v"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.parametrize("slug", sorted(p.parent.name for p in PROBLEMS.glob("*/problem.md")))
def test_a_solution_that_hardcodes_the_example_fails(full_check, slug):
    """Every exercise has wrong/hardcoded_*.py, fitted to the example's numbers, and the tests
    catch it."""
    fixtures = sorted((PROBLEMS / slug / "wrong").glob("hardcoded_*.py"))
    assert fixtures, f"{slug} has no wrong/hardcoded_*.py"
    start = re.search(rf"^ +\d+  {re.escape(slug)} +solution", full_check.stdout, re.MULTILINE)
    assert start, full_check.stdout
    block = re.split(r"\n +\d+  \S", full_check.stdout[start.start() :], maxsplit=1)[
        0
    ]  # the exercise's lines
    assert re.search(
        r"solution +(\d+)/\1 +pass +starter +(\d+)/\2 +fail +wrong +(\d+)/\3 +fail +ok", block
    ), block
    for fixture in fixtures:
        assert re.search(rf"wrong/{fixture.stem}\.py: caught by test_\w+", block), block


def test_the_full_check_passes_and_verifies_the_tree(full_check):
    assert full_check.returncode == 0, full_check.stdout + full_check.stderr
    assert (
        f"All {len(list(PROBLEMS.glob('*/problem.md')))} exercises are consistent"
        in full_check.stdout
    )
    assert "Tree verified: the" in full_check.stdout
