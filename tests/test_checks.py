"""checks/mixed_batch.py: the chapter's mixed-batch parity check, its thresholds, its table and
`python -m minillm check`."""

import pytest
import torch

from minillm.checks.mixed_batch import (
    general_path,
    mixed_batch_check,
    print_check_table,
    threshold_for,
)
from minillm.model import Transformer
from minillm.paged import PagedAttention, PagedKVCache
from minillm.runner import ModelRunner, build_batch


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return tiny_checkpoint(seed=11)  # vocab 512, hidden 32, 2 layers, no tokenizer


@pytest.fixture(scope="module")
def cpu_rows(ckpt):
    return mixed_batch_check(ckpt, device="cpu", dtype=torch.float32)


def test_check_covers_prefill_decode_and_chunked_prefill(cpu_rows):
    assert [(r["request"], r["step"], r["phase"]) for r in cpu_rows] == [
        ("A", 1, "prefill"),
        ("B", 1, "prefill"),
        ("A", 2, "decode"),
        ("B", 2, "decode"),
        ("C", 2, "chunked prefill"),
    ]
    assert cpu_rows[4]["positions"].startswith(
        "10.."
    )  # C's second chunk starts after the 10 tokens of step 1


def test_fp32_cpu_matches_both_references(cpu_rows):
    for r in cpu_rows:
        assert r["threshold"] == 1e-4
        assert r["err_vs_minillm"] < 1e-4 and r["err_vs_transformers"] < 1e-4 and r["ok"]


def test_bf16_on_cpu_is_within_its_stated_threshold(ckpt):
    rows = mixed_batch_check(ckpt, device="cpu", dtype=torch.bfloat16)
    for r in rows:
        assert 0 < r["err_vs_minillm"] < r["threshold"], (
            r
        )  # low precision is not exact, but close
    assert all(r["ok"] for r in rows)


def test_low_precision_threshold_scales_with_the_logits():
    assert threshold_for(torch.float32, 30.0) == 1e-4
    assert threshold_for(torch.bfloat16, 30.0) == pytest.approx(32 * 2**-8 * 30.0)
    assert threshold_for(torch.float16, 30.0) == pytest.approx(32 * 2**-11 * 30.0)
    with pytest.raises(ValueError, match="float64"):
        threshold_for(torch.float64, 30.0)


def test_bf16_threshold_still_catches_a_batching_bug(ckpt):
    """A decode at the wrong position (off by one) must fail the bf16 threshold, or the check
    proves nothing."""
    reference = Transformer.from_pretrained(ckpt)
    model = Transformer.from_pretrained(ckpt, dtype=torch.bfloat16)
    cfg, ids, table = model.cfg, list(range(3, 40, 2)), [1, 2, 3, 4, 5, 6]
    runner = ModelRunner(
        model,
        PagedKVCache(
            cfg.num_hidden_layers, 8, 4, cfg.num_key_value_heads, cfg.hd, torch.bfloat16
        ),
    )
    runner.forward(build_batch([(ids, 0, table, False)], 4))
    wrong = runner.forward(build_batch([([77], len(ids) - 1, table, True)], 4))[0].float()
    want = reference(torch.tensor([ids + [77]]))[0, -1]
    assert (wrong - want).abs().max().item() > threshold_for(
        torch.bfloat16, want.abs().max().item()
    )


def test_each_mixed_row_equals_the_request_alone_through_the_runner(ckpt, capsys):
    """Same steps, same attention path: batching changes nothing on the CPU in float32."""
    rows = mixed_batch_check(ckpt, device="cpu", dtype=torch.float32, runner_alone=True)
    assert [r["err_vs_runner_alone"] for r in rows] == [0.0] * 5
    assert all(r["ok"] for r in rows) and print_check_table(rows)
    out = capsys.readouterr().out
    assert "vs alone" in out and "same attention path" in out


def test_the_alone_column_fails_a_row(capsys, ckpt):
    rows = mixed_batch_check(ckpt, device="cpu", dtype=torch.float32, runner_alone=True)
    bad = dict(rows[2], err_vs_runner_alone=0.5, ok=False)
    assert print_check_table([*rows, bad]) is False
    assert "FAIL" in capsys.readouterr().out


def test_general_path_switches_off_the_decode_only_path(ckpt):
    model = Transformer.from_pretrained(ckpt)
    kv = PagedKVCache.for_model(model, 4, 4)
    args = ([[1], [2, 3]], [3, 5], [0, 1, 2], [6, 12])  # two decodes: one new token each
    assert PagedAttention(kv, *args).decode_only
    assert not general_path(PagedAttention)(kv, *args).decode_only


def test_table_reports_failure(capsys, cpu_rows):
    assert print_check_table(cpu_rows) is True
    bad = dict(cpu_rows[0], err_vs_transformers=0.5, ok=False)
    assert print_check_table([*cpu_rows, bad]) is False
    out = capsys.readouterr().out
    assert "FAIL" in out and "NOT all 6 rows" in out
    assert print_check_table([]) is False


def test_cli_check_on_cpu(ckpt, monkeypatch, capsys):
    from minillm.cli import main

    monkeypatch.setenv("MINILLM_MODEL", str(ckpt))
    assert main(["check", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "mixed-batch parity on cpu, float32" in out and out.count(" OK") == 5


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_check_passes_on_cuda(ckpt, dtype):
    rows = mixed_batch_check(ckpt, device="cuda", dtype=dtype)
    assert print_check_table(rows)


def test_cli_check_rejects_unknown_dtype_and_missing_cuda(monkeypatch, capsys):
    from minillm.cli import main

    with pytest.raises(
        SystemExit
    ) as exit_:  # argparse rejects it before any work (exit status 2)
        main(["check", "--dtype", "float64"])
    assert exit_.value.code == 2
    assert "expected float32, bfloat16 or float16" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["check", "--device", "cuda"]) == 2
        assert "no CUDA device" in capsys.readouterr().out
