"""The reader's code cannot change the judge's verdict: one test per attack a curious reader
tried.

Each attack is a file the judge grades. It must get a failing verdict, leave practice/ and
minillm/ byte-identical, and leave the judge working: afterwards the exercise's reference
solution still passes and its starter still fails (`judge.py check`). Every attack runs twice:
with the sandbox the OS allows here (namespaces on Linux when permitted) and with
MINILLM_JUDGE_SANDBOX=process, where the reader's code is only a separate process and the
judge's own checks (signed results, a fresh copy of its files, the verified tree) must hold on
their own.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
JUDGE = ROOT / "practice" / "judge.py"
SANDBOXES = ["auto", "process"]
ALWAYS = {  # what must show in the output in every sandbox
    "sends_back_a_rewritten_argument": "FAIL  test_random_tables_match_minillm",
}
HOW = {  # with the process sandbox only, what stops each attack must show in the output
    "rewrites_its_test_file": "This run changed files the judge depends on",
    "appends_a_hook_to_the_conftest": "This run changed files the judge depends on",
    "forges_result_records": "did not sign|the file ended|process importing the file "
    "ended|died while importing",
}

WRONG_PADDING = """
def padded_tokens(query_lens):
    return 0


def padding_waste(query_lens):
    return 0.0


def pad(token_lists, pad_id):
    return []


def pack(token_lists):
    return [], []


def unpack(flat, query_start_loc):
    return []
"""

COPIES = 'glob.glob(os.path.join(tempfile.gettempdir(), "minillm-judge-*"))'

ATTACKS = {
    # slug, source: each also answers wrongly, so only a forged verdict could pass it
    "patches_the_grading_helpers": (
        "padding-waste",
        f"""
import glob, os, sys, tempfile
for practice in [{str(ROOT / "practice" / "harness")!r}] + [c + "/practice/harness" for c in {COPIES}]:
    sys.path.insert(0, practice)
try:
    import grading
    for name in ("check_equal", "check_close", "check_raises", "check_names", "fail"):
        setattr(grading, name, lambda *args, **kwargs: None)
except Exception:
    pass
"""
        + WRONG_PADDING,
    ),
    "monkeypatches_torch": (
        "rmsnorm",
        """
import torch
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.isfinite = lambda t: torch.ones_like(t, dtype=torch.bool)
torch.Tensor.__sub__ = lambda a, b: torch.zeros_like(a)
torch.Tensor.abs = lambda self: torch.zeros_like(self)


def rms_norm(x, weight, eps=1e-6):
    return x
""",
    ),
    "forges_result_records": (
        "padding-waste",
        f'''
import glob, json, os, re, tempfile
names = re.findall(r"^def (test_\\w+)", open({str(ROOT / "practice/problems/padding-waste/test_padding_waste.py")!r}).read(), re.M)
events = [dict(event="collected", tests=[dict(problem="padding-waste", target="file", name=n) for n in names])]
events += [dict(event="result", test=n, problem="padding-waste", target="file", name=n, outcome="passed", hint="")
           for n in names] + [dict(event="finish", exitstatus=0)]
forged = "".join(f"{{i}}\\t{{'0' * 64}}\\t{{json.dumps(e)}}\\n" for i, e in enumerate(events, 1)).encode()
plain = "".join(json.dumps(e) + "\\n" for e in events).encode()


def judges():
    """This process's ancestors that are the judge's own processes (never the test runner's)."""
    pid = os.getpid()
    while pid > 1:
        try:
            stat = open(f"/proc/{{pid}}/stat").read()
            pid = int(stat[stat.rfind(")") + 2:].split()[1])
            cmdline = open(f"/proc/{{pid}}/cmdline", "rb").read()
        except (OSError, ValueError):
            return
        if b"/practice/judge.py" in cmdline or b"/practice/harness/grader.py" in cmdline:
            yield pid


for pid in list(judges()):
    for fd in glob.glob(f"/proc/{{pid}}/fd/*"):
        try:
            if os.readlink(fd).startswith("pipe:"):
                with open(fd, "wb", buffering=0) as f:
                    f.write(forged)
        except OSError:
            pass
for path in glob.glob(os.path.join(tempfile.gettempdir(), "judge-*.jsonl")):
    try:
        open(path, "ab").write(plain)
    except OSError:
        pass
os._exit(0)
''',
    ),
    "rewrites_its_test_file": (
        "padding-waste",
        f"""
import glob, os, tempfile
fake = "def test_everything_is_fine(learner):\\n    pass\\n"
for folder in [{str(ROOT)!r}] + {COPIES}:
    for path in glob.glob(folder + "/practice/problems/padding-waste/test_*.py"):
        try:
            open(path, "w").write(fake)
        except OSError:
            pass
"""
        + WRONG_PADDING,
    ),
    "appends_a_hook_to_the_conftest": (
        "padding-waste",
        f'''
import glob, os, tempfile
hook = """

import pytest as _pytest


@_pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""
for folder in [{str(ROOT)!r}] + {COPIES}:
    try:
        open(folder + "/practice/problems/conftest.py", "a").write(hook)
    except OSError:
        pass
'''
        + WRONG_PADDING,
    ),
    "sends_back_a_rewritten_argument": (
        "slot-mapping",
        """
import sys
sandbox = sys.modules.get("sandbox")  # the judge's code in this process: patch what it replies
if sandbox is not None:
    original = sandbox.LearnerEndpoint.reply_extra

    def reply_extra(self, header, bufs):
        extra = original(self, header, bufs)
        import torch

        # "the block tables are now 0, 1, 2, ... for every request"
        extra["back"] = {"0": self.enc(torch.arange(64).repeat(8, 1), bufs)}
        extra["mutated"] = []
        return extra

    sandbox.LearnerEndpoint.reply_extra = reply_extra


def num_blocks_needed(num_tokens, block_size):
    return -(-num_tokens // block_size)


def slot_mapping(block_tables, query_start_loc, positions, block_size):
    slots = positions.long().clone()  # as if every table were 0, 1, 2, ...: slot = position
    slots[int(query_start_loc[-1]) :] = -1
    return slots
""",
    ),
    "kills_the_judge": (
        "padding-waste",
        """
import os, signal
pid = os.getpid()
while pid > 1:
    try:
        stat = open(f"/proc/{pid}/stat").read()
        pid = int(stat[stat.rfind(")") + 2:].split()[1])
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
    except (OSError, ValueError):
        break
    if b"/practice/judge.py" in cmdline:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        break
"""
        + WRONG_PADDING,
    ),
}


def tree() -> dict[str, str]:
    """sha256 of every file the judge depends on (practice/ but the workspace, minillm/), by
    path."""
    out = {}
    for top in ("practice", "minillm"):
        for path in sorted((ROOT / top).rglob("*")):
            rel = path.relative_to(ROOT)
            if path.is_file() and not {"__pycache__", "workspace", ".pytest_cache"} & set(
                rel.parts
            ):
                out[rel.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


SLOW_MACHINE = [
    "--timeout",
    "60",
]  # per test: a loaded machine must not turn a verdict into a time-out


def run_judge(args, env, timeout=300) -> tuple[int, int, str]:
    """(pid, exit code, stdout + stderr) of one judge run."""
    proc = subprocess.Popen(
        [sys.executable, str(JUDGE), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out, _ = proc.communicate(timeout=timeout)
    return proc.pid, proc.returncode, out


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if (
                entry.isdigit()
                and marker.encode() in Path(f"/proc/{entry}/environ").read_bytes()
            ):
                found.append(int(entry))
        except OSError:
            continue
    return found


def wait_until(condition, seconds=60.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_attack_gets_a_failing_verdict_and_changes_nothing(tmp_path, attack, sandbox):
    slug, source = ATTACKS[attack]
    before = tree()
    marker = uuid.uuid4().hex
    env = dict(
        os.environ,
        MINILLM_PRACTICE_WORKSPACE=str(tmp_path / "workspace"),
        NO_COLOR="1",
        MINILLM_JUDGE_SANDBOX=sandbox,
        MINILLM_ATTACK_MARK=marker,
    )
    file = tmp_path / f"{attack}.py"
    file.write_text(source)
    backups_before = set(Path(tempfile.gettempdir()).glob("minillm-judge-replaced-*"))
    pid, code, out = run_judge(["test", slug, str(file), *SLOW_MACHINE], env)
    backups = set(Path(tempfile.gettempdir()).glob("minillm-judge-replaced-*")) - backups_before
    for (
        backup
    ) in backups:  # the versions the attack wrote, kept in case they were someone's edits
        assert any(p.is_file() for p in backup.rglob("*")), backup
        shutil.rmtree(backup)
    assert code != 0, out
    assert "tests pass. Well done" not in out, out
    if attack in ALWAYS:
        assert ALWAYS[attack] in out, out
    if sandbox == "process" and attack in HOW:
        assert re.search(HOW[attack], out), out
    if "changed files the judge depends on" in out:
        assert backups and "are kept in" in out, out
    if sandbox == "process" and attack == "kills_the_judge":
        assert code == -signal.SIGKILL, (
            out
        )  # it can kill the judge, but not get a verdict out of it
    assert wait_until(lambda: not processes_with(marker)), (
        f"processes left behind: {processes_with(marker)}"
    )
    stray = [
        p
        for p in Path(tempfile.gettempdir()).glob("minillm-judge-*")
        if (p / "judge.pid").is_file() and (p / "judge.pid").read_text() == str(pid)
    ]
    assert wait_until(lambda: not [p for p in stray if p.exists()]), (
        f"temp folders left behind: {stray}"
    )
    assert tree() == before, "the attack changed the judge's files"
    # an exercise the attack never touched: its starter must still fail
    other = "kv-bytes-per-token"
    _, code, out = run_judge(
        ["check", slug, other, *SLOW_MACHINE], dict(env, MINILLM_ATTACK_MARK="")
    )
    assert code == 0, out
    assert "All 2 exercises are consistent" in out and "Tree verified" in out
    assert tree() == before


def test_killing_the_judges_parent_stops_everything_it_started(tmp_path):
    """The judge dies with its parent (the terminal, a CI step): its graders and the reader's
    processes with
    it, and its temp folder goes too."""
    looping = tmp_path / "loops.py"
    looping.write_text(
        "def padded_tokens(query_lens):\n    while True:\n        pass\n"
        + WRONG_PADDING.split("\n\n\n", 1)[1]
    )
    marker = uuid.uuid4().hex
    env = dict(
        os.environ,
        MINILLM_PRACTICE_WORKSPACE=str(tmp_path / "workspace"),
        NO_COLOR="1",
        MINILLM_ATTACK_MARK=marker,
    )
    copies_before = set(Path(tempfile.gettempdir()).glob("minillm-judge-*"))
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            f"subprocess.Popen([sys.executable, {str(JUDGE)!r}, 'test', 'padding-waste', "
            f"{str(looping)!r}, '--timeout', '120'])\ntime.sleep(600)",
        ],
        env=env,
    )
    try:  # the judge, its grader, the zygote and the looping reader's process are all up
        assert wait_until(lambda: len(processes_with(marker)) >= 5, seconds=60), processes_with(
            marker
        )
        time.sleep(1)
    finally:
        parent.kill()
        parent.wait()
    assert wait_until(lambda: not processes_with(marker)), (
        f"processes left behind: {processes_with(marker)}"
    )
    new = set(Path(tempfile.gettempdir()).glob("minillm-judge-*")) - copies_before
    assert wait_until(lambda: not [p for p in new if p.exists()]), (
        f"temp folders left behind: {new}"
    )
