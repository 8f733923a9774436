"""``llm-zoo bench``: run every benchmark script and write the results page, ``docs/results.md``.

::

    llm-zoo bench --quick                        # every script's smallest setting: about 1 min on 2 CPU cores
    llm-zoo bench                                # the full settings: about 45 min on 2 CPU cores
    llm-zoo bench --only kuhn_headline env_throughput

On 2 busy CPU cores ``--quick`` took 40 s. The full run took 42 min on this project's 2-core CPU
(2026-11-29, commit 351f0b3): 39 min for ``kuhn_headline`` (MaskablePPO's 3 seeds, then the 12 LLM
trainings, two at a time, about 5 min each), which ``kuhn_credit`` then reuses from the shared runs
folder, and a few minutes for all the other scripts together.

Each script in ``benchmarks/`` runs as its own subprocess, one after another (so that no two
measure at once; ``--jobs N`` runs N side by side, for a smoke run whose seconds are not read), with ``--quick`` when asked and ``--out DIR`` where the script takes it, under a
timeout. A script that fails, times out or ends without its JSON line is reported as such in the
page; the rest still run. The page holds the machine (CPU, cores, memory, GPU, load), the
versions, the date and the total wall-clock, then per script: its command, exit status and run
time, its printed output verbatim (its tables), its JSON line, the Markdown tables it wrote to its
``--out`` folder, and its plots (PNGs it wrote to ``--out`` are copied next to the page, under
``results/<script>/``; PNGs it wrote under ``docs/`` are linked where they are).

A script with a ``# bench-opt-in: REASON`` line (a pretrained model's rows on a CPU: hours) runs only when
``--only`` names it; a plain run leaves it out and keeps its section as it was.

A run with ``--only`` updates the page in place: the sections of the scripts it ran replace theirs
(or are inserted in :func:`discover`'s order), every other section is kept as it was, and each section's
``Run:`` line says which run made it (a rewritten one names its machine too; the Machine table stays
that of the run that made the page). A plain run writes the whole page anew. ``--args NAME=ARGS`` passes
more arguments to one script of the run (``--only learning --args 'learning=--envs proposer_solver_v0'``: a
part of a long benchmark), and both the page's and the script's command lines show them; the options the harness
sets itself (:data:`HARNESS_OPTIONS`) are refused there rather than overridden.

The README is left alone: it quotes figures from this page and links to the section it quotes
(``tests/test_readme_figures.py`` fails when a quoted figure is not on the section it links to), so a
rerun that changes a figure shows up there instead of being pasted over.

The scripts' contract (``benchmarks/_harness.py``, which they share): each takes ``--quick``, prints readable
tables, and ends with one line, a JSON object of its headline figures, including ``seconds``, its wall-clock. The
checkout's ``benchmarks`` is a package: its modules run as ``python -m benchmarks.NAME`` from the checkout's root;
a folder passed by ``--benchmarks`` that is not one runs each file as ``python FILE``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PageFormatError", "ScriptResult", "add_parser", "discover", "keep", "machine", "opt_in", "render", "run",
           "run_script", "update"]

ROOT = Path(__file__).resolve().parents[1]
"""The source checkout: benchmarks/ and docs/ live here."""
BENCHMARKS = ROOT / "benchmarks"
PAGE = ROOT / "docs" / "results.md"
HEADLINE = "kuhn_headline"
"""The script that comes first on the page: every system on Kuhn poker, the main job among them."""
BESIDE: dict[str, tuple[str, tuple[str, ...]]] = {
    "reward_hacks": ("judge_agreement", ("judge_hacks_paid", "proposer_hacks_paid", "user_sim_hacks_paid",
                                         "attempts", "errors")),
}
"""Script -> (the script it is read beside, its figures quoted there). It comes right after that script
on the page, and that script's section ends with those figures and a link: how far the judge agrees
with the hidden tests is read with how many reward hacks get past the rewards."""
TIMEOUT_S = {"quick": 300.0, "full": 4 * 3600.0}
"""Default timeout per script: --quick settings take seconds; the full Kuhn trainings about an hour each."""
VERSIONS = ("llm_zoo", "torch", "transformers", "pettingzoo", "gymnasium", "numpy", "stable-baselines3",
            "sb3-contrib", "open_spiel", "vllm")
"""Distributions whose versions the page lists (those installed)."""
MAX_OUTPUT_LINES = 300
"""Longest printed output the page shows per script; the rest is cut, and the page says so."""


@dataclass
class ScriptResult:
    """What one benchmark script did.

    Attributes:
        name: The script's stem (``kuhn_headline``).
        command: The command line run, as a shell would show it.
        status: ``ok``; ``skipped`` (exit 0, its JSON says ``skipped``: a requirement such as a GPU is
            missing); ``failed`` (non-zero exit); ``timeout``; ``no JSON`` (exit 0, no JSON last line).
        returncode: Its exit status (None when killed at the timeout).
        seconds: Wall-clock of the subprocess.
        stdout: What it printed, less the JSON line.
        stderr: Its stderr.
        figures: The JSON line's object, or None.
        tables: Markdown files it wrote to its ``--out`` folder: file name -> text.
        plots: Paths of its plots, relative to the page's folder.
    """

    name: str
    command: str
    status: str
    returncode: int | None
    seconds: float
    stdout: str
    stderr: str
    figures: dict[str, Any] | None = None
    tables: dict[str, str] = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------
# Running the scripts
# ---------------------------------------------------------------------------------------------------


def discover(scripts_dir: Path = BENCHMARKS) -> dict[str, Path]:
    """Return the benchmark scripts of ``scripts_dir``, stem -> path: the headline script first, then by
    name, except that a script of :data:`BESIDE` comes right after the one it is read beside."""
    if not scripts_dir.is_dir():
        raise FileNotFoundError(f"no benchmarks folder at {scripts_dir}; llm-zoo bench runs the scripts of a "
                                "source checkout (git clone, then pip install -e .), or pass --benchmarks DIR")
    paths = sorted(p for p in scripts_dir.glob("*.py") if not p.name.startswith("_"))
    order = [p.stem for p in sorted(paths, key=lambda p: (p.stem != HEADLINE, p.stem))]
    for name, (partner, _) in BESIDE.items():
        if name in order and partner in order:
            order.remove(name)
            order.insert(order.index(partner) + 1, name)
    by_stem = {p.stem: p for p in paths}
    return {name: by_stem[name] for name in order}


def _takes(script: Path, option: str) -> bool:
    """True when the script declares ``option`` (e.g. ``--out``: its plots and tables then go where we say): an
    ``add_argument("--out", ...)``, or the harness's ``add_out(...)`` (``benchmarks/_harness.py``)."""
    helper = "add_" + option.lstrip("-").replace("-", "_")
    return re.search(rf"""add_argument\(\s*["']{re.escape(option)}["']|\b{helper}\(""", script.read_text()) is not None


def opt_in(script: Path) -> str | None:
    """Why ``script`` runs only when named by ``--only``: the reason on its ``# bench-opt-in: REASON`` line (a
    benchmark of hours, such as a pretrained model's rows on a CPU), else None. A plain run leaves it out and keeps
    its section on the page as the run that made it wrote it."""
    named = re.search(r"^# bench-opt-in: (.+)$", script.read_text(), re.MULTILINE)
    return named.group(1).strip() if named else None


HARNESS_OPTIONS = ("--out", "--runs-dir", "--quick")
"""Options :func:`run_script` passes itself (``--quick`` from ``llm-zoo bench --quick``): refused in ``--args``."""


def _launch(script: Path) -> list[str]:
    """The arguments that start ``script``: ``-m benchmarks.NAME`` for a module of a package in the checkout (the
    checkout's ``benchmarks``, run from its root), else the file's path (a folder of scripts passed by
    ``--benchmarks``)."""
    folder = script.resolve().parent
    if (folder / "__init__.py").is_file() and folder.parent == ROOT:
        return ["-m", f"{folder.name}.{script.stem}"]
    return [str(script)]


def _python(script: Path) -> str:
    """The interpreter for ``script``: the one its ``# bench-python: PATH`` line names (relative to the
    checkout) where that exists, else this one (vllm_throughput's vLLM lives in .venv-vllm, scripts/test.sh)."""
    named = re.search(r"^# bench-python: (\S+)$", script.read_text(), re.MULTILINE)
    return str(ROOT / named.group(1)) if named and (ROOT / named.group(1)).is_file() else sys.executable


def _pngs(folder: Path) -> dict[Path, float]:
    return {p: p.stat().st_mtime for p in folder.rglob("*.png")} if folder.is_dir() else {}


def _text(value: str | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value or ""


def run_script(script: Path, *, quick: bool, timeout_s: float, assets: Path, page_dir: Path,
               docs: Path = ROOT / "docs", runs: Path | None = None, extra: Sequence[str] = ()) -> ScriptResult:
    """Run one script in a subprocess; collect its output, JSON line, Markdown tables and plots.

    Args:
        script: The script's path.
        quick: Pass ``--quick``.
        timeout_s: Kill it (and everything it started) after this many seconds.
        assets: Where its plots are copied (``assets/<stem>/``), each replacing the file of its name; nothing else
            in that folder is touched.
        page_dir: The page's folder: plot paths are given relative to it.
        docs: Plots written under this folder during the run are linked where they are.
        runs: Passed as ``--runs-dir`` to a script that declares it: training runs shared between scripts
            (``kuhn_headline`` and ``kuhn_credit`` train the same 12 Kuhn runs; the second reuses them).
        extra: More arguments for the script, after ``--quick`` (``--args``: a part of a long benchmark).
    """
    name = script.stem
    launch = _launch(script)
    argv = [_python(script), *launch, *(["--quick"] if quick else []), *extra]
    with tempfile.TemporaryDirectory(prefix=f"bench_{name}_") as tmp:
        out = Path(tmp) / "out"
        if _takes(script, "--out"):
            argv += ["--out", str(out)]
        if runs is not None and _takes(script, "--runs-dir"):
            argv += ["--runs-dir", str(runs)]
        where = launch if launch[0] == "-m" else [os.path.relpath(script, ROOT) if script.is_relative_to(ROOT)
                                                  else str(script)]
        shown = shlex.join(["python", *where, *argv[1 + len(launch):]]).replace(str(out), "OUT")
        before = _pngs(docs)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
        start = time.perf_counter()
        # A session of its own, so that a timeout kills what it started too (sandboxes, worker pools).
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
            returncode: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it ended just now
            try:
                stdout, stderr = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired as exc:  # a daemon of its own session holds the pipes open
                proc.kill()
                stdout, stderr = exc.stdout, exc.stderr
            returncode = None
        seconds = time.perf_counter() - start
        # the out folder is temporary: its files are on the page, under their names
        stdout, stderr = _text(stdout).replace(str(out), "OUT"), _text(stderr)

        lines = stdout.rstrip("\n").splitlines()
        figures = None
        if lines:
            try:
                parsed = json.loads(lines[-1])
            except json.JSONDecodeError:
                parsed = None
            if isinstance(parsed, dict):
                figures, lines = parsed, lines[:-1]
        status = ("timeout" if returncode is None else "failed" if returncode != 0 else "no JSON" if figures is None
                  else "skipped" if "skipped" in figures else "ok")

        tables = {p.name: p.read_text() for p in sorted(out.glob("*.md"))} if out.is_dir() else {}
        # only the plots of this run replace theirs: records kept beside them (docs/results/learning/judge.md,
        # with the plots it links) are not the run's to remove
        target = assets / name
        plots = []
        for png in sorted(out.glob("*.png")) if out.is_dir() else []:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(png, target / png.name)
            plots.append(target / png.name)
        copied = {p.name for p in plots}
        plots += [p for p, mtime in sorted(_pngs(docs).items())
                  if before.get(p) != mtime and not p.is_relative_to(assets) and p.name not in copied]
    return ScriptResult(name, shown, status, returncode, seconds, "\n".join(lines), stderr, figures, tables,
                        [Path(os.path.relpath(p, page_dir)).as_posix() for p in plots])


# ---------------------------------------------------------------------------------------------------
# The machine
# ---------------------------------------------------------------------------------------------------


def _cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name, and on Linux its widest vector instructions (``AMD EPYC, AVX2``); ``cpuinfo``: the
    text of ``/proc/cpuinfo`` (read when not given).

    Two hosts with the same model name may differ in their vector units; the kernels torch picks differ
    with them, and so does the rounding of a long training run's sums, so its last digits can differ too.
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""  # not Linux: the platform's name alone
    lines = cpuinfo.splitlines()
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)
    flags = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith(("flags", "Features"))), ()))
    vector = next((label for flag, label in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"),
                                             ("sve", "SVE"), ("asimd", "NEON")) if flag in flags), None)
    name = name or platform.processor() or platform.machine()
    return f"{name}, {vector}" if vector else name


def _memory_gib() -> float | None:
    try:
        kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))
        return kib / 2**20
    except (OSError, StopIteration, ValueError):
        return None


def _gpus() -> str:
    if shutil.which("nvidia-smi") is None:
        return "none"
    try:
        query = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "none (nvidia-smi failed)"
    names = [line.strip() for line in query.stdout.splitlines() if line.strip()]
    return "; ".join(names) if query.returncode == 0 and names else "none"


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True,
                               timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def machine() -> dict[str, Any]:
    """Return the machine's description: CPU, cores, memory, GPU, OS, load, Python and package versions."""
    versions = {}
    for dist in VERSIONS:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    memory = _memory_gib()
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory": f"{memory:.1f} GiB" if memory else "unknown",
        "gpu": _gpus(),
        "os": platform.platform(),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown",
        "python": platform.python_version(),
        "versions": versions,
        "commit": _commit(),
    }


# ---------------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------------


def _seconds(s: float) -> str:
    return f"{s:.2f} s" if s < 1 else f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"


def _fence(text: str, lang: str = "text") -> str:
    ticks = "```" if "```" not in text else "~~~~"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def _cut(text: str, limit: int = MAX_OUTPUT_LINES) -> str:
    lines = text.splitlines()
    if len(lines) <= limit:
        return text
    return "\n".join([*lines[:limit], f"... ({len(lines) - limit} more lines cut)"])


def _summary(script: Path) -> str:
    """The first line of a script's docstring, in Markdown (reST's double backticks made single)."""
    match = re.match(r'\s*(?:#[^\n]*\n\s*)*[rR]?"""(.*?)(?:\n|""")', script.read_text())
    return match.group(1).strip().replace("``", "`") if match else ""


def _json(figures: dict[str, Any]) -> str:
    """The JSON line, one key a line; a mapping of mappings (a table's rows) one row a line."""
    def value(v: Any) -> str:
        if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
            return "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(x)}" for k, x in v.items()) + "\n }"
        return json.dumps(v)

    return "{\n" + ",\n".join(f" {json.dumps(k)}: {value(v)}" for k, v in figures.items()) + "\n}"


STAMPED = ("Each section's \"Run:\" line says which run made it (command, date, commit); the table below is the "
           "machine of the command above, and a section rewritten by `--only` names its own machine.")
"""The header sentence that says the sections carry their own stamps."""
SCRIPTS_HEADER = ("| script | status | run time | what it compares |", "|---|---|---|---|")
_ROW = re.compile(r"^\| \[(?P<name>[A-Za-z0-9_.-]+)\]\(#(?P=name)\) \| (?P<status>[^|]*?) \| [^|]*? \| .*\|$")
_BESIDE_LINE = "Read beside [{name}](#{name}), next: "


class PageFormatError(ValueError):
    """The existing results page is not one :func:`render` wrote (or it was edited by hand)."""


def _stamp(command: str, date: str, info: dict[str, Any], *, own_machine: bool) -> str:
    """The section's "Run:" line; ``own_machine`` adds the machine (a partial run's, not the Machine table's)."""
    text = f"Run: `{command}` on {date}, commit {info['commit']}"
    if own_machine:
        versions = ", ".join(f"{dist} {version}" for dist, version in info["versions"].items())
        text += (f"; machine: {info['cpu']}, {info['cores']} cores ({info['cores_usable']} usable), "
                 f"{info['memory']}, GPU: {info['gpu']}, {info['os']}, load {info['load']}, "
                 f"Python {info['python']}, {versions}")
    return text + "."


def _section(r: ScriptResult, summary: str, stamp: str) -> list[str]:
    """One script's section, from its heading to its last blank line, without the BESIDE sentence."""
    exit_text = "killed at the timeout" if r.returncode is None else f"exit status {r.returncode}"
    out = [f"## {r.name}", ""]
    if summary:
        out += [summary, ""]
    out += [stamp, "", f"`{r.command}`: {exit_text}, {_seconds(r.seconds)}, {r.status}.", ""]
    for name, table in r.tables.items():
        out += [f"Table (`{name}`):", "", table.strip(), ""]
    for plot in r.plots:
        out += [f"![{r.name}: {Path(plot).stem}]({plot})", ""]
    out += ["Printed output:", "", _fence(_cut(r.stdout) or "(nothing)"), ""]
    if r.figures is not None:
        out += ["JSON line:", "", _fence(_json(r.figures), "json"), ""]
    if r.status not in ("ok", "skipped"):
        tail = "\n".join(r.stderr.rstrip().splitlines()[-40:])
        out += ["stderr (last 40 lines):", "", _fence(tail or "(nothing)"), ""]
    return out


def _row(r: ScriptResult, summary: str) -> str:
    return f"| [{r.name}](#{r.name}) | {r.status} | {_seconds(r.seconds)} | {summary} |"


def _beside(name: str, keys: Sequence[str], figures: dict[str, Any] | None, status: str) -> str:
    quoted = ", ".join(f"{k} {json.dumps(figures.get(k))}" for k in keys) if figures is not None \
        else f"no figures ({status})"
    return _BESIDE_LINE.format(name=name) + quoted + "."


def _not_ok(statuses: dict[str, str]) -> list[str]:
    failed = [name for name, status in statuses.items() if status not in ("ok", "skipped")]
    return [f"**Not ok: {', '.join(failed)}.** Their sections show the error.", ""] if failed else []


def render(results: Sequence[ScriptResult], info: dict[str, Any], *, quick: bool, seconds: float,
           command: str, date: str, summaries: dict[str, str] | None = None) -> str:
    """Return the results page (Markdown)."""
    summaries = summaries or {}
    out = [
        "# Results",
        "",
        f"Generated by `{command}` on {date}; total wall-clock {_seconds(seconds)}"
        f"{' (every script at its --quick setting: smoke budgets, not results)' if quick else ''}. "
        "Do not edit by hand: run the command again.",
        "",
        STAMPED,
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {info['cpu']} |",
        f"| cores | {info['cores']} ({info['cores_usable']} usable by this process) |",
        f"| memory | {info['memory']} |",
        f"| GPU | {info['gpu']} |",
        f"| OS | {info['os']} |",
        f"| load average at start (1, 5, 15 min) | {info['load']} |",
        f"| Python | {info['python']} |",
        *(f"| {dist} | {version} |" for dist, version in info["versions"].items()),
        f"| commit | {info['commit']} |",
        "",
        "## Scripts",
        "",
        *SCRIPTS_HEADER,
        *(_row(r, summaries.get(r.name, "")) for r in results),
        "",
        *_not_ok({r.name: r.status for r in results}),
    ]
    by_name = {r.name: r for r in results}
    stamp = _stamp(command, date, info, own_machine=False)
    for r in results:
        out += _section(r, summaries.get(r.name, ""), stamp)
        for name, (partner, keys) in BESIDE.items():
            if partner == r.name and name in by_name:
                out += [_beside(name, keys, by_name[name].figures, by_name[name].status), ""]
    return "\n".join(out).rstrip() + "\n"


def _fences(lines: Sequence[str]) -> list[bool]:
    """For each line, whether it lies outside a fenced code block (the fence lines themselves count as inside)."""
    outside, fence = [], None
    for line in lines:
        if fence is None and (line.startswith("```") or line.startswith("~~~~")):
            fence = line[:3] if line.startswith("```") else "~~~~"
            outside.append(False)
        elif fence is not None:
            outside.append(False)
            if line.rstrip() == fence:
                fence = None
        else:
            outside.append(True)
    return outside


@dataclass
class _Page:
    """A results page split up: its header (down to the Scripts table), the table's rows and the sections."""

    header: list[str]
    rows: dict[str, str]
    statuses: dict[str, str]
    sections: dict[str, list[str]]


def _parse(text: str) -> _Page:
    """Split a page :func:`render` wrote; raise :class:`PageFormatError` saying what is off."""
    lines = text.split("\n")
    if not lines or lines[0] != "# Results":
        raise PageFormatError(f"it does not start with '# Results' (it starts {text[:60]!r})")
    outside = _fences(lines)
    heads = [i for i, line in enumerate(lines) if outside[i] and line.startswith("## ")]
    if [lines[i] for i in heads[:2]] != ["## Machine", "## Scripts"]:
        raise PageFormatError(f"its first headings are {[lines[i] for i in heads[:2]]!r}, "
                              "expected ['## Machine', '## Scripts']")
    scripts = heads[1]
    if tuple(lines[scripts + 2:scripts + 4]) != SCRIPTS_HEADER:
        raise PageFormatError(f"the Scripts table's header is {lines[scripts + 2:scripts + 4]!r}, "
                              f"expected {list(SCRIPTS_HEADER)!r}")
    rows, statuses, i = {}, {}, scripts + 4
    while i < len(lines) and lines[i].startswith("|"):
        match = _ROW.match(lines[i])
        if match is None:
            raise PageFormatError(f"Scripts table row {lines[i][:80]!r} is not '| [name](#name) | status | ... |'")
        if match["name"] in rows:
            raise PageFormatError(f"the Scripts table has {match['name']!r} twice")
        rows[match["name"]], statuses[match["name"]] = lines[i], match["status"]
        i += 1
    # the sections, in the table's order, each from its heading (outside any fence) to the next one's
    starts, names = [], list(rows)
    for j in heads[2:]:
        if len(starts) < len(names) and lines[j] == f"## {names[len(starts)]}":
            starts.append(j)
    if len(starts) != len(names):
        missing = names[len(starts)]
        raise PageFormatError(f"the Scripts table lists {missing!r} but no '## {missing}' section follows in order")
    between = [line for line in lines[i:starts[0] if starts else len(lines)]
               if line.strip() and not line.startswith("**Not ok:")]
    if between:
        raise PageFormatError(f"unexpected text between the Scripts table and the first section: {between[0][:80]!r}")
    ends = [*starts[1:], len(lines)]
    sections = {name: lines[s:e] for name, s, e in zip(names, starts, ends)}
    if names:
        sections[names[-1]] = "\n".join(sections[names[-1]]).rstrip().split("\n") + [""]
    return _Page(lines[:scripts], rows, statuses, sections)


def _figures(section: Sequence[str]) -> dict[str, Any] | None:
    """The JSON line a kept section shows, read back; None when it has none (or it does not parse)."""
    outside = _fences(section)
    for i, line in enumerate(section):
        if outside[i] and line == "JSON line:" and i + 2 < len(section) and section[i + 2].startswith(("```", "~~~~")):
            fence = section[i + 2][:3] if section[i + 2].startswith("```") else "~~~~"
            body = []
            for inner in section[i + 3:]:
                if inner.rstrip() == fence:
                    try:
                        figures = json.loads("\n".join(body))
                    except json.JSONDecodeError:
                        return None
                    return figures if isinstance(figures, dict) else None
                body.append(inner)
    return None


def update(text: str, results: Sequence[ScriptResult], info: dict[str, Any], *, command: str, date: str,
           summaries: dict[str, str] | None = None, order: Sequence[str] = ()) -> str:
    """Return the page ``text`` with the sections of ``results`` put in place (a partial run, ``--only``).

    A section of a script in ``results`` replaces that script's section, or, if the page has none, is inserted
    where ``order`` (:func:`discover`'s) puts it; every other section is kept byte for byte, except for the
    BESIDE sentence of a section whose partner was re-run. The Scripts table keeps a row for every script on
    the page; the header and the Machine table stay those of the run that made the page. The sections
    rewritten carry this run's stamp with its machine.

    Raises:
        PageFormatError: ``text`` is not a page :func:`render` wrote.
    """
    summaries = summaries or {}
    page = _parse(text)
    rank = {name: i for i, name in enumerate(order)}
    names = list(page.sections)
    stamp = _stamp(command, date, info, own_machine=True)
    ran = {r.name: r for r in results}
    for r in results:
        page.sections[r.name] = _section(r, summaries.get(r.name, ""), stamp)
        page.rows[r.name], page.statuses[r.name] = _row(r, summaries.get(r.name, "")), r.status
        if r.name not in names:
            _insert(names, r.name, rank)
    # the BESIDE sentences: rebuilt where the script or its partner was re-run, from the page's figures if kept
    for name, (partner, keys) in BESIDE.items():
        if partner not in page.sections or (name not in ran and partner not in ran):
            continue
        section = page.sections[partner]
        outside = _fences(section)
        kept = [line for i, line in enumerate(section)
                if not (outside[i] and line.startswith(_BESIDE_LINE.format(name=name)))]
        kept = "\n".join(kept).rstrip().split("\n") + [""]
        if name in page.sections:
            figures = ran[name].figures if name in ran else _figures(page.sections[name])
            kept += [_beside(name, keys, figures, page.statuses[name]), ""]
        page.sections[partner] = kept
    return _assemble(page, names)


def _insert(names: list[str], name: str, rank: Mapping[str, int]) -> None:
    """Put ``name`` into the page's ``names`` where ``rank`` (:func:`discover`'s order) puts it."""
    later = [i for i, other in enumerate(names) if rank.get(other, -1) > rank.get(name, len(rank))]
    names.insert(later[0] if later else len(names), name)


def _assemble(page: _Page, names: Sequence[str]) -> str:
    """The page's text: its header, the Scripts table's rows of ``names`` and their sections, in that order."""
    header = page.header
    if STAMPED not in header:
        header = [*header[:4], STAMPED, "", *header[4:]] if header[3:4] == [""] else [*header, STAMPED, ""]
    out = [*header, "## Scripts", "", *SCRIPTS_HEADER, *(page.rows[n] for n in names), "",
           *_not_ok({n: page.statuses[n] for n in names})]
    for name in names:
        out += page.sections[name]
    return "\n".join(out).rstrip() + "\n"


def keep(text: str, old: str, names: Sequence[str], order: Sequence[str] = ()) -> str:
    """Return the new page ``text`` with the sections of ``names`` carried over from the page it replaces, ``old``,
    byte for byte, with their rows (a plain run leaves the opt-in scripts out, :func:`opt_in`: their sections stay
    those of the runs that made them); ``old`` unreadable or without them: ``text`` as it is."""
    try:
        before = _parse(old)
    except PageFormatError:
        return text
    page = _parse(text)
    carried = [n for n in names if n in before.sections and n not in page.sections]
    if not carried:
        return text
    rank = {name: i for i, name in enumerate(order)}
    order_now = list(page.sections)
    for name in carried:
        page.sections[name], page.rows[name] = before.sections[name], before.rows[name]
        page.statuses[name] = before.statuses[name]
        _insert(order_now, name, rank)
    return _assemble(page, order_now)


def run(*, quick: bool = False, only: Sequence[str] | None = None, timeout_s: float | None = None,
        page: Path = PAGE, scripts_dir: Path = BENCHMARKS,
        log: Any = sys.stderr, jobs: int = 1, args: Mapping[str, str] | None = None) -> list[ScriptResult]:
    """Run the benchmark scripts and write the page; return the results.

    Args:
        quick: Run every script at its ``--quick`` setting.
        only: Script stems to run (default: all but the opt-in ones, :func:`opt_in`, whose sections the page
            written anew keeps as they were). The page is then updated in
            place (:func:`update`): their sections replace theirs, the others are kept; a page that cannot be
            parsed is written anew with only these (a warning says so, and the old page is kept as ``.bak``).
        timeout_s: Per script (default ``TIMEOUT_S``).
        page: The results page to write; plots go to ``page.parent / "results"``.
        scripts_dir: Where the scripts are.
        log: Where one progress line per script goes (None: nowhere).
        jobs: Scripts run side by side (1: one after another, so that no two measure at once). The scripts that
            share training runs (``--runs-dir``) still run one after another, in order, on one of them.
        args: Script stem -> more arguments for it, as a shell would split them (``{"learning": "--envs
            proposer_solver_v0"}``); each named script must be among those run, and the page's command line
            and the script's own show them.

    Raises:
        ValueError: ``only`` or ``args`` names a script that is not there (or, for ``args``, not run), an
            ``args`` value a shell could not split, or ``jobs`` below 1.
    """
    if int(jobs) < 1:
        raise ValueError(f"jobs must be >= 1 (scripts side by side); got {jobs!r}")
    scripts = discover(scripts_dir)
    if not only:  # the opt-in scripts (hours each) run only when named
        scripts = {n: p for n, p in scripts.items() if not opt_in(p)}
    if only:
        names = [n.removesuffix(".py") for n in only]
        unknown = [n for n in names if n not in scripts]
        if unknown:
            raise ValueError(f"--only: no benchmark script {unknown!r} in {scripts_dir}; choose from {sorted(scripts)}")
        scripts = {n: p for n, p in scripts.items() if n in names}
    extra: dict[str, list[str]] = {}
    for name, value in (args or {}).items():
        name = name.removesuffix(".py")
        if name not in scripts:
            raise ValueError(f"--args: {name!r} is not among the scripts this run runs ({sorted(scripts)}); "
                             "name it in --only too")
        try:
            extra[name] = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"--args {name}: cannot split {value!r} into arguments as a shell would ({exc})") from exc
        # the harness sets these itself, after the script's own arguments (the last one given wins): one here would be
        # silently overridden, so it is refused
        owned = [w for w in extra[name] for option in HARNESS_OPTIONS if w == option or w.startswith(option + "=")]
        if owned:
            raise ValueError(f"--args {name}: {owned} is set by the harness itself (its plots and tables go to a "
                             f"temporary --out copied onto the page, its runs to a shared --runs-dir); drop it, or "
                             f"run `python -m benchmarks.{name} ...` directly to choose them")
    timeout_s = timeout_s or TIMEOUT_S["quick" if quick else "full"]
    page = Path(page)
    page.parent.mkdir(parents=True, exist_ok=True)
    info = machine()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = ("llm-zoo bench" + (" --quick" if quick else "") + (f" --only {' '.join(scripts)}" if only else "")
               + "".join(f" --args {shlex.quote(name + '=' + shlex.join(words))}" for name, words in extra.items()))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_runs_") as shared_runs:
        def one(name: str) -> ScriptResult:
            if log is not None:
                print(f"bench: {name} ...", file=log, flush=True)
            result = run_script(scripts[name], quick=quick, timeout_s=timeout_s, assets=page.parent / "results",
                                page_dir=page.parent, runs=Path(shared_runs), extra=extra.get(name, ()))
            if log is not None:
                print(f"bench: {name} {result.status} in {_seconds(result.seconds)}", file=log, flush=True)
            return result

        # the scripts that share runs form one chain, in order (the second reuses the first's runs); each other
        # script is a chain of its own
        sharing = [n for n, path in scripts.items() if _takes(path, "--runs-dir")]
        chains = ([sharing] if sharing else []) + [[n] for n in scripts if n not in sharing]
        with ThreadPoolExecutor(max_workers=min(int(jobs), len(chains) or 1)) as pool:
            done = {r.name: r for chain in pool.map(lambda chain: [one(n) for n in chain], chains) for r in chain}
    results = [done[name] for name in scripts]
    seconds = time.perf_counter() - start
    summaries = {name: _summary(path) for name, path in scripts.items()}
    text = None
    if only and page.exists():
        old = page.read_text(errors="replace")
        try:
            text = update(old, results, info, command=command, date=date, summaries=summaries,
                          order=list(discover(scripts_dir)))
        except PageFormatError as exc:
            backup = page.with_name(page.name + ".bak")
            backup.write_text(old)
            print(f"bench: warning: cannot update {page} in place ({exc}); writing it anew with only "
                  f"{', '.join(scripts)}; the old page is kept as {backup}", file=log or sys.stderr, flush=True)
    if text is None:
        text = render(results, info, quick=quick, seconds=seconds, command=command, date=date, summaries=summaries)
        if not only and page.exists():  # a page written anew keeps what the opt-in scripts' own runs wrote
            every = discover(scripts_dir)
            text = keep(text, page.read_text(errors="replace"), [n for n, p in every.items() if opt_in(p)],
                        order=list(every))
    page.write_text(text)
    return results


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``bench`` subcommand on ``llm-zoo``'s subparsers; return its parser."""
    parser = subparsers.add_parser("bench", help="run every benchmark script and write the results page "
                                   "(docs/results.md)")
    parser.add_argument("--quick", action="store_true",
                        help="every script at its smallest setting (about 1 min on 2 CPU cores; the full run "
                             "took 42 min there)")
    parser.add_argument("--only", nargs="+", metavar="NAME", default=None,
                        help="run only these scripts (stems of benchmarks/*.py, e.g. kuhn_headline) and update "
                             "the page in place: their sections (stamped with this run's command, date, commit and "
                             "machine) replace theirs, every other script's section is kept; a page that cannot be "
                             "parsed is written anew (old one kept as PAGE.bak)")
    parser.add_argument("--args", action="append", default=[], metavar="NAME=ARGS",
                        help="more arguments for one script, split as a shell would (repeatable), e.g. "
                             "--only learning --args 'learning=--envs proposer_solver_v0': a part of a long "
                             "benchmark, with the page's command line saying which")
    parser.add_argument("--jobs", type=int, default=1,
                        help="scripts run side by side (default 1: one after another, so that no two measure at "
                             "once; more only for a smoke run whose seconds are not read)")
    parser.add_argument("--timeout", type=float, default=None,
                        help=f"seconds per script before it is killed (default {TIMEOUT_S['quick']:g} with "
                             f"--quick, else {TIMEOUT_S['full']:g})")
    parser.add_argument("--page", default=str(PAGE), help="the page to write; plots go beside it under results/ "
                        "(default: docs/results.md of the checkout)")
    parser.add_argument("--benchmarks", default=str(BENCHMARKS), help="folder of the scripts (default: benchmarks/ "
                        "of the checkout)")
    parser.set_defaults(func=_command)
    return parser


def _command(args: argparse.Namespace) -> int:
    if args.timeout is not None and args.timeout <= 0:
        raise ValueError(f"--timeout must be > 0 seconds; got {args.timeout!r}")
    extra: dict[str, str] = {}
    for item in args.args:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise ValueError(f"--args expects NAME=ARGS (a script's stem, then its arguments); got {item!r}")
        extra[name] = f"{extra[name]} {value}" if name in extra else value
    results = run(quick=args.quick, only=args.only, timeout_s=args.timeout, page=Path(args.page),
                  scripts_dir=Path(args.benchmarks), jobs=args.jobs, args=extra)
    bad = [f"{r.name} ({r.status})" for r in results if r.status not in ("ok", "skipped")]
    print(f"wrote {args.page}: {len(results) - len(bad)}/{len(results)} scripts ok or skipped"
          + (f"; not ok: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0
