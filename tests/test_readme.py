"""The README's example runs as written, and its quick start has exactly two commands."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.DOTALL)


def test_python_examples_run(capsys):
    blocks = _blocks("python")
    assert blocks, "the README should hold a python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})
    out = capsys.readouterr().out
    assert "Hand 3" in out  # the example prints a three-hand transcript


def test_quick_start_has_two_commands_and_ci_runs_the_second():
    quick = _blocks("bash")[0]
    commands = [line for line in quick.splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2
    ci = (README.parent / ".ci" / "run").read_text()
    assert commands[1].strip() in ci
