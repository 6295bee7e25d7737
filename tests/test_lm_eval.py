"""EleutherAI's lm-evaluation-harness (`lm-eval`, its `local-completions` model) against the
server:
a multiple-choice task (loglikelihood: echo + prompt logprobs, several token-id prompts per
request) and a generation task (16 string prompts per request), on small local JSONL files,
offline, with the remote tokenizer (/tokenizer_info, /tokenize, /detokenize), on the real model
(SmolLM2), whose score on easy questions must be above chance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minillm.bench.server_process import LaunchedServer
from minillm.checkpoints import resolve_model

EASY_MC = Path(__file__).parent / "data" / "easy_mc.jsonl"

MC = [
    ("Which is a colour?", ["red", "seven", "dog"], 0),
    ("Which is a number?", ["blue", "three", "cat"], 1),
    ("Which is an animal?", ["green", "two", "horse"], 2),
    ("Which is a day?", ["Monday", "salt", "rain"], 0),
    ("Which is a fruit?", ["stone", "apple", "chair"], 1),
    ("Which is a month?", ["bread", "car", "May"], 2),
]

TASKS = """
task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {path}
test_split: test
"""
MC_TASK = (
    TASKS
    + """output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
metric_list:
  - metric: acc
"""
)
GEN_TASK = (
    TASKS
    + """output_type: generate_until
doc_to_text: "Q: {{{{question}}}}\\nA:"
doc_to_target: answer
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 4
metric_list:
  - metric: exact_match
"""
)


def run_lm_eval(url: str, model: str, tasks: str, folder, batch_size: int = 16) -> None:
    """lm-eval's local-completions on the task YAMLs in `folder`, offline; results in
    folder/out."""
    env = dict(
        os.environ,
        HF_DATASETS_OFFLINE="1",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_CACHE=str(folder / "hf"),
        TOKENIZERS_PARALLELISM="false",
    )
    cmd = [
        sys.executable,
        "-m",
        "lm_eval",
        "--model",
        "local-completions",
        "--model_args",
        f"model={model},base_url={url}/v1/completions,num_concurrent=1,max_retries=1,"
        "tokenizer_backend=remote",
        "--tasks",
        tasks,
        "--include_path",
        str(folder),
        "--batch_size",
        str(batch_size),
        "--output_path",
        str(folder / "out"),
        "--log_samples",
    ]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


@pytest.mark.slow
def test_lm_eval_runs_multiple_choice_and_generation_and_smollm2_scores_above_chance(tmp_path):
    """One lm-eval run against one server on SmolLM2-135M-Instruct, three tasks:

    - `easy_mc`: 32 easy questions (capitals, sums, colours, animals), four choices each, the
      right one at each position 8 times: chance is 25%, and so is what any preference for a
      position scores. The server shares each question's blocks among its four choices (prefix
      caching).
    - `minillm_mc`: six three-way questions; each choice must come back as one finite
      loglikelihood and an is-greedy flag.
    - `minillm_gen`: 16 string prompts per request, generated until a newline.
    """
    with open(tmp_path / "mc.jsonl", "w") as f:
        for q, choices, answer in MC:
            f.write(json.dumps({"question": q, "choices": choices, "answer": answer}) + "\n")
    with open(tmp_path / "gen.jsonl", "w") as f:
        for i in range(16):
            f.write(
                json.dumps({"question": f"what is {i} plus {i}?", "answer": str(2 * i)}) + "\n"
            )
    (tmp_path / "mc.yaml").write_text(
        MC_TASK.format(name="minillm_mc", path=tmp_path / "mc.jsonl")
    )
    (tmp_path / "gen.yaml").write_text(
        GEN_TASK.format(name="minillm_gen", path=tmp_path / "gen.jsonl")
    )
    (tmp_path / "easy.yaml").write_text(MC_TASK.format(name="easy_mc", path=EASY_MC))
    path = resolve_model("smollm2")
    server = LaunchedServer(path, extra=["--enable-prefix-caching"])
    try:
        server.wait_ready(timeout=300)
        run_lm_eval(server.url, path.name, "easy_mc,minillm_mc,minillm_gen", tmp_path)
        log = server.output()
    finally:
        server.stop()
    res = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())["results"]
    acc = res["easy_mc"]["acc,none"]
    print(f"SmolLM2 on {EASY_MC.name}: acc {acc:.3f} (chance 0.25)")
    assert acc >= 0.5, acc  # 16 of 32 at chance 1/4 has probability below 0.3%
    assert 0 <= res["minillm_mc"]["acc,none"] <= 1
    assert 0 <= res["minillm_gen"]["exact_match,none"] <= 1

    def samples(task: str) -> list[dict]:
        return [
            json.loads(line)
            for p in (tmp_path / "out").rglob(f"samples_{task}_*.jsonl")
            for line in p.read_text().splitlines()
        ]

    samples_mc = samples("minillm_mc")
    assert len(samples_mc) == len(MC)
    # one finite loglikelihood per choice (lm-eval writes [loglikelihood, is_greedy] as text)
    for s in samples_mc:
        assert len(s["filtered_resps"]) == 3
        assert all(
            -1e4 < float(r[0]) < 0 and r[1] in ("True", "False") for r in s["filtered_resps"]
        )
    generated = samples("minillm_gen")
    assert len(generated) == 16 and all(isinstance(g["resps"][0][0], str) for g in generated)
    assert "Traceback" not in log
