"""`make test` sets up what it needs: the Makefile's Chromium step, run against fake apt-get,
sudo and python.

The `chromium` target runs before the tests. Each case below simulates one machine state through
the Makefile's variables (where Chromium should be, which apt-get and sudo to call, which
python), with stand-in commands that only log how they were called, so no package is installed
and nothing is downloaded; the table says which commands `make` must call and what it must
print.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")

FAKE = {
    # apt-get: logs, and "installs" Chromium by creating the file make was told to expect
    # (unless told not to)
    "apt-get": 'echo "apt-get $*" >> "$LOG"\n'
    'if [ "$1" = install ] && [ "$FAKE_APT_WORKS" = 1 ]; then touch "$FAKE_CHROMIUM"; chmod '
    '+x "$FAKE_CHROMIUM"; fi\n',
    "sudo": 'echo "sudo $*" >> "$LOG"\nif [ "$1" = -n ] && [ "$FAKE_SUDO_WORKS" != 1 ]; then '
    "exit 1; fi\n"
    'if [ "$1" = -n ]; then shift; fi\nexec "$@"\n',
    # the venv's python: `-c` is the "is Playwright's Chromium installed?" check, `-m playwright
    # install` the install
    "python": 'if [ "$1" = -c ]; then echo "python -c <check>" >> "$LOG"; exit '
    '"${FAKE_PLAYWRIGHT_HAS:-1}"; fi\n'
    'echo "python $*" >> "$LOG"\n'
    # a stage fails when its command line contains $FAKE_FAIL
    'case "$*" in *"${FAKE_FAIL:-@none@}"*) exit 1;; esac\n',
    "ruff": 'echo "ruff $*" >> "$LOG"\ncase "ruff $*" in *"${FAKE_FAIL:-@none@}"*) exit 1;; '
    "esac\n",
}


@pytest.fixture
def machine(tmp_path):
    """A fake machine: bin/ with the stand-ins, a venv whose stamp is fresh, and a log of
    calls."""
    bin_dir, venv = tmp_path / "bin", tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    for name, body in FAKE.items():
        path = (venv / "bin" / name) if name in ("python", "ruff") else (bin_dir / name)
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (venv / ".installed-stamp").touch()  # newer than pyproject.toml: make does not reinstall
    return tmp_path


def run_make(
    machine: Path, target="chromium", apt=True, sudo="", chromium_present=False, **env
):
    chromium = machine / "chromium"
    if chromium_present:
        chromium.touch()
        chromium.chmod(0o755)
    log = machine / "log"
    log.write_text("")
    variables = [
        f"VENV={machine / 'venv'}",
        f"MINILLM_CHROMIUM={chromium}",
        f"APT_GET={machine / 'bin' / 'apt-get' if apt else machine / 'no-such-apt-get'}",
        f"SUDO={machine / 'bin' / 'sudo' if sudo else ''}",
    ]
    full_env = dict(os.environ, LOG=str(log), FAKE_CHROMIUM=str(chromium), **env)
    full_env.pop("MINILLM_SKIP_BROWSER", None) if "MINILLM_SKIP_BROWSER" not in env else None
    done = subprocess.run(
        ["make", "--no-print-directory", "-s", "-C", str(ROOT), target, *variables],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    calls = [
        line.replace(str(machine / "bin") + "/", "") for line in log.read_text().splitlines()
    ]
    done.stdout = done.stdout.replace(str(machine / "bin") + "/", "")
    return done, calls


APT = ["apt-get update -qq", "apt-get install -y -qq chromium"]
PLAYWRIGHT = ["python -c <check>", "python -m playwright install chromium"]


@pytest.mark.parametrize(
    "case, kwargs, calls, says",
    [
        ("Chromium already there", dict(chromium_present=True), [], None),
        ("skipped on purpose", dict(MINILLM_SKIP_BROWSER="1"), [], None),
        ("root with apt-get", dict(FAKE_APT_WORKS="1"), APT, "installing Debian's chromium"),
        (
            "user with password-less sudo",
            dict(sudo=True, FAKE_SUDO_WORKS="1", FAKE_APT_WORKS="1"),
            ["sudo -n true"] + [c for a in APT for c in (f"sudo {a}", a)],
            "(sudo apt-get install chromium)",
        ),
        (
            "user without sudo rights",
            dict(sudo=True),
            ["sudo -n true"] + PLAYWRIGHT,
            "installing Playwright's own Chromium",
        ),
        (
            "no apt-get (macOS, Fedora...)",
            dict(apt=False),
            PLAYWRIGHT,
            "installing Playwright's own Chromium",
        ),
        (
            "no apt-get, Playwright's build already installed",
            dict(apt=False, FAKE_PLAYWRIGHT_HAS="0"),
            ["python -c <check>"],
            None,
        ),
        (
            "apt-get that cannot provide it",
            dict(FAKE_APT_WORKS="0"),
            APT + PLAYWRIGHT,
            "apt-get did not provide",
        ),
    ],
)
def test_chromium_step_installs_only_what_is_missing(machine, case, kwargs, calls, says):
    done, made = run_make(machine, **kwargs)
    assert done.returncode == 0, done.stderr
    assert made == calls, case
    if says is None:
        assert done.stdout == "", f"{case}: nothing to do should print nothing"
    else:
        assert says in done.stdout, done.stdout
        installs = sum(
            c.endswith("install -y -qq chromium") or c.endswith("install chromium")
            for c in made
        )
        assert len(done.stdout.strip().splitlines()) <= installs + 1, (
            "one line per install, plus a fallback"
        )


def test_the_real_playwright_check_runs_under_make(machine):
    """The check snippet itself (not a stand-in) reports whether Playwright's own Chromium is
    installed."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        installed = Path(p.chromium.executable_path).exists()
    fake_python = machine / "venv" / "bin" / "python"
    real = Path(ROOT / ".venv" / "bin" / "python")
    python = shutil.which("python3") if not real.exists() else str(real)
    fake_python.write_text(
        f'#!/bin/sh\nif [ "$1" = -c ]; then exec "{python}" "$@"; fi\necho "python $*" >> '
        '"$LOG"\n'
    )
    done, made = run_make(machine, apt=False)
    assert done.returncode == 0, done.stderr
    assert made == ([] if installed else ["python -m playwright install chromium"])


def test_make_test_sets_up_chromium_before_running_any_test(machine):
    done = subprocess.run(
        [
            "make",
            "-n",
            "-C",
            str(ROOT),
            "test",
            f"VENV={machine / 'venv'}",
            f"MINILLM_CHROMIUM={machine / 'chromium'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stdout.splitlines()
    first_pytest = next(i for i, line in enumerate(lines) if "-m pytest" in line)
    assert any("playwright install chromium" in line for line in lines[:first_pytest])
    assert any("apt-get install" in line for line in lines[:first_pytest])


def test_ci_does_no_set_up_of_its_own():
    ci = (ROOT / ".ci" / "run").read_text()
    commands = [
        line.strip()
        for line in ci.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert commands[-1] == "make test test-numerics"
    assert not any(
        word in c for c in commands for word in ("apt-get", "pip ", "playwright", "venv")
    )


@pytest.mark.parametrize(
    "failing, failed",
    [
        (None, []),
        ("ruff format", ["lint"]),
        ("--nbval", ["pytest"]),  # the notebooks run in the pytest stage, beside the tests
    ],
)
def test_make_test_runs_every_stage_and_names_the_ones_that_failed(machine, failing, failed):
    done, calls = run_make(
        machine,
        target="test",
        chromium_present=True,
        **({"FAKE_FAIL": failing} if failing else {}),
    )
    assert calls[:2] == ["ruff check .", "ruff format --check ."], calls  # the style first
    stages = [c for c in calls if c.startswith("python ")]
    assert [s.split()[2] for s in stages] == ["pytest"], stages
    # one pytest run holds the tests (the site's and the judge's included) and every notebook,
    # on all cores
    words = stages[0].split()
    assert {"tests", "notebooks", "--nbval", "-n"} <= set(words), stages[0]
    assert "--ignore=tests/test_site.py" not in words
    if failed:
        assert done.returncode != 0
        assert f"make: FAILED stages: {' '.join(failed)}" in done.stdout
    else:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "make: all stages passed: lint pytest" in done.stdout
