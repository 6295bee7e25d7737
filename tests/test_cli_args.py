"""Command-line options are checked by argparse before any work starts; --quick only fills in
what was not given."""

import pytest

from minillm.bench import common as bench_common
from minillm.bench import throughput as bench
from minillm.cli import main
from minillm.model import Transformer


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a command gets as far as loading a model or generating a checkpoint."""

    def refuse(*args, **kwargs):
        raise AssertionError("work started before the options were checked")

    monkeypatch.setattr(Transformer, "from_pretrained", refuse)
    monkeypatch.setattr("minillm.checkpoints.ensure_checkpoint", refuse)
    monkeypatch.setattr(bench_common, "ensure_checkpoint", refuse)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            "bench --concurrency abc",
            "argument --concurrency: got 'abc', expected a list of comma-separated ints >= 1",
        ),
        (
            "bench --concurrency 1,0",
            "argument --concurrency: got '1,0', expected a list of comma-separated ints >= 1",
        ),
        ("bench --requests 0", "argument --requests: got '0', expected an int >= 1"),
        ("bench --requests 2.5", "argument --requests: got '2.5', expected an int >= 1"),
        (
            "bench --prompt-lens 10,5",
            "argument --prompt-lens: got '10,5', expected min,max with min <= max",
        ),
        (
            "bench --prompt-lens 8",
            "argument --prompt-lens: got '8', expected 2 comma-separated ints",
        ),
        (
            "bench --prompt-lens 0,4",
            "argument --prompt-lens: got '0,4', expected 2 comma-separated ints >= 1",
        ),
        ("bench --max-tokens -3", "argument --max-tokens: got '-3', expected an int >= 1"),
        ("bench --repeats 0", "argument --repeats: got '0', expected an int >= 1"),
        ("bench --budget x", "argument --budget: got 'x', expected an int >= 1"),
        ("bench --threads -1", "argument --threads: got '-1', expected an int >= 1"),
        ("bench --seed -2", "argument --seed: got '-2', expected an int >= 0"),
        (
            "bench --model /no/such/folder",
            "argument --model: got '/no/such/folder', expected an existing checkpoint folder",
        ),
        (
            "bench --save {tmp}",
            "argument --save: got '{tmp}', which is a folder: expected a file path such as "
            "{tmp}/bench.json",
        ),
        (
            "bench --save {tmp}/afile/out.json",
            "argument --save: got '{tmp}/afile/out.json', expected a path this user can write",
        ),
        ("bench --quick --requests 0", "argument --requests: got '0', expected an int >= 1"),
        (
            "bench --mixed-requests 0",
            "argument --mixed-requests: got '0', expected an int >= 1",
        ),
        (
            "bench --mixed-prompt-lens 256,8",
            "argument --mixed-prompt-lens: got '256,8', expected min,max with min <= max",
        ),
        (
            "bench --mixed-max-tokens 0,8",
            "argument --mixed-max-tokens: got '0,8', expected 2 comma-separated ints >= 1",
        ),
        (
            "bench --mixed-concurrency 0",
            "argument --mixed-concurrency: got '0', expected an int >= 1",
        ),
        ("demo --max-new-tokens 0", "argument --max-new-tokens: got '0', expected an int >= 1"),
        (
            "demo --max-new-tokens ten",
            "argument --max-new-tokens: got 'ten', expected an int >= 1",
        ),
        (
            "check --dtype float64",
            "argument --dtype: got 'float64', expected float32, bfloat16 or float16",
        ),
        ("check --device tpu", "argument --device: invalid choice: 'tpu'"),
    ],
)
def test_bad_option_is_rejected_before_any_work(tmp_path, capsys, no_work, argv, message):
    (tmp_path / "afile").write_text("")
    with pytest.raises(SystemExit) as exit_:
        main(argv.format(tmp=tmp_path).split())
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message.format(tmp=tmp_path) in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            [],
            dict(
                concurrency=[1, 2, 4, 8, 16],
                requests=16,
                prompt_lens=[8, 32],
                max_tokens=32,
                repeats=3,
                mixed_requests=16,
                mixed_prompt_lens=[8, 256],
                mixed_max_tokens=[8, 128],
                mixed_concurrency=8,
            ),
        ),
        (
            ["--quick"],
            dict(
                concurrency=[1, 2, 4], requests=4, prompt_lens=[4, 12], max_tokens=4, repeats=1
            ),
        ),
        (
            ["--quick", "--requests", "7", "--max-tokens", "9"],
            dict(
                concurrency=[1, 2, 4], requests=7, prompt_lens=[4, 12], max_tokens=9, repeats=1
            ),
        ),
        (
            ["--quick", "--concurrency", "2,8", "--prompt-lens", "3,3", "--repeats", "2"],
            dict(concurrency=[2, 8], requests=4, prompt_lens=[3, 3], max_tokens=4, repeats=2),
        ),
        (["--", "--quick", "--repeats", "5"], dict(repeats=5, requests=4)),
    ],
)
def test_quick_sets_only_what_the_reader_did_not_pass(argv, expected):
    args = bench.parse_args(argv)
    assert {k: getattr(args, k) for k in expected} == expected


def test_save_is_checked_first_and_written_at_the_end(tmp_path):
    out = (
        tmp_path / "new" / "folder" / "bench.json"
    )  # folders that do not exist yet are fine: they are created
    assert bench.parse_args(["--save", str(out)]).save == out


def test_demo_with_one_new_token_runs(capsys):
    assert main(["demo", "--max-new-tokens", "1"]) == 0
    assert "max |logit difference|" in capsys.readouterr().out
