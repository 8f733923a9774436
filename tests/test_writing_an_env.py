"""docs/writing_an_env.md runs as the page shows it: its code is examples/haggle.py, its checks pass, its command trains."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "writing_an_env.md"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.S | re.M)


def blocks(info: str) -> list[str]:
    """Return the page's fenced code blocks whose info string is ``info``, in order, verbatim."""
    return [body for head, body in FENCE.findall(PAGE.read_text()) if head.strip() == info]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def test_the_page_shows_the_example_file_exactly_and_it_is_under_100_lines():
    code = "".join(blocks("python file=examples/haggle.py"))
    assert code == (ROOT / "examples" / "haggle.py").read_text()
    assert len(code.splitlines()) < 100


def test_the_pages_code_passes_pettingzoos_tests_and_trains(tmp_path):
    # the env exactly as the page shows it, in a directory of its own: nothing else of examples/ is there
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "haggle.py").write_text("".join(blocks("python file=examples/haggle.py")))
    (check,) = blocks("python")
    done = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Passed API test" in done.stdout and "deal at" in done.stdout
    (commands,) = blocks("bash")
    for line in commands.strip().splitlines():
        args = shlex.split(line)
        assert args[:3] == ["python", "-m", "llm_zoo"], line
        done = subprocess.run([sys.executable, *args[1:]], cwd=tmp_path, env=_env(), capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(r) for r in (tmp_path / "runs" / "haggle" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(math.isfinite(r["losses/loss/main"]) and r["losses/tokens/main"] > 0 for r in rows)
    assert {"charts/reward/seller", "charts/reward/buyer"} <= set(rows[0])
    config = json.loads((tmp_path / "runs" / "haggle" / "config.json").read_text())
    assert config["env"] == "haggle_v0"
