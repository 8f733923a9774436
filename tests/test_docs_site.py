"""The documentation site builds clean, and every ``llm-zoo`` command its pages show runs.

The site is MkDocs (Material) over ``docs/`` with an API reference from docstrings (mkdocstrings):
``mkdocs build --strict`` must pass with no warning (a broken link or anchor, a page left out of the
nav, a reference that does not resolve), and each public name must have its entry in the built API
pages. The commands: every ``llm-zoo ...`` (or ``python -m llm_zoo ...``, or ``torchrun ... -m llm_zoo
...``) a page shows, in a shell block or an inline code span, goes through the real command line in a
child process: ``--help`` and ``play`` run for real; ``train``, ``sft``, ``eval`` and ``bench`` run up
to the call that would start the long work (the config built and checked, the checkpoint or script
resolved), which is replaced by a stop that reports what it was handed. A command named bare
(``llm-zoo eval``) runs as ``llm-zoo eval --help``. Run as a script, this file is that child.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.S | re.M)
SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")
SHELL = {"bash", "sh", "shell", "console"}

# Each public name and the page of the API reference that must document it (the id mkdocstrings gives its entry).
PUBLIC = {
    "llm_zoo.md": ["llm_zoo.spec.register", "llm_zoo.spec.env_spec", "llm_zoo.spec.make_env",
                   "llm_zoo.spec.registered", "llm_zoo.spec.EnvSpec", "llm_zoo.episode.Episode"],
    "policies.md": ["llm_zoo.policy.Policy", "llm_zoo.policy.Reply", "llm_zoo.policy.Observation",
                    "llm_zoo.policy.ScoresTokens",
                    "llm_zoo.policy.RandomPolicy", "llm_zoo.policy.TabularPolicy",
                    "llm_zoo.policies.transformers.TransformersPolicy", "llm_zoo.policies.vllm.VLLMPolicy",
                    "llm_zoo.policies.openai.OpenAIPolicy"],
    "trainers.md": ["llm_zoo.trainers.rollout.collect", "llm_zoo.trainers.grpo.TrainConfig"],
}

# Words the pages write in place of a value; a command runs with these put in.
SHOWN_DIR = "runs/shown"  # where the child keeps a checkpoint in the trainer's layout, for eval and --resume
PLACEHOLDERS = {r"\bENV\b": "kuhn_poker_v0", r"\bOUT\b": "out", r"\bDIR\b": SHOWN_DIR, r"\bseed=S\b": "seed=0",
                r"runs/<that run>": SHOWN_DIR}
COMMAND_SECONDS = 120  # each command's limit in the child (the slowest, a --help that builds a config, takes ~5 s)
# A page's commands run in the state the page describes: the tutorial's env registered by importing it.
PRELOAD = {"writing_an_env.md": ["examples.haggle"]}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "NO_MKDOCS_2_WARNING": "1",
            "TOKENIZERS_PARALLELISM": "false"}


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=config.parent, env=_env(), capture_output=True, text=True, timeout=300)


# ---------------------------------------------------------------------------------------------
# THE SITE
# ---------------------------------------------------------------------------------------------


def test_the_site_builds_strict_and_documents_every_public_name(tmp_path):
    start = time.perf_counter()
    done = _mkdocs(ROOT / "mkdocs.yml", tmp_path / "site")
    seconds = time.perf_counter() - start
    log = done.stdout + done.stderr
    assert done.returncode == 0 and "WARNING" not in log, f"mkdocs build --strict failed:\n{log[-4000:]}"
    assert seconds < 60, f"the site took {seconds:.1f} s to build; the suite allows 60"
    missing = []
    for page, names in PUBLIC.items():
        html = (tmp_path / "site" / "api" / page.removesuffix(".md") / "index.html").read_text()
        for name in names:
            # an entry is a heading with the name's id, then its docstring before the next entry's heading
            at = html.find(f'id="{name}"')
            end = html.find('id="llm_zoo.', at + 1)
            if at < 0 or "<p>" not in html[at:end if end > 0 else None]:
                missing.append(name)
    assert missing == [], f"the API reference has no entry, or one without its docstring, for {missing}"
    # docstrings' Sphinx roles are code spans on the site (scripts/griffe_sphinx_roles.py), not :class: text
    left = [(page, m) for page in PUBLIC for m in re.findall(r"\S*:(?:class|func|meth|mod|attr|data|exc):\S*",
            (tmp_path / "site" / "api" / page.removesuffix(".md") / "index.html").read_text())]
    assert left == [], f"Sphinx roles left as text on the API pages: {left[:10]}"
    # every page of docs/ made it into the site
    for md in DOCS.rglob("*.md"):
        rel = md.relative_to(DOCS).with_suffix("")
        built = tmp_path / "site" / (rel.parent if rel.name in ("index", "README") else rel) / "index.html"
        assert built.exists(), f"{md.relative_to(ROOT)} was not built into the site (expected {built})"


def test_the_env_pages_are_what_their_docstrings_generate(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_env_docs", ROOT / "scripts" / "gen_env_docs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.ROOT = tmp_path  # it writes tmp_path/docs/envs/
    assert gen.main() == 0
    generated = {p.name: p.read_text() for p in (tmp_path / "docs" / "envs").iterdir()}
    committed = {p.name: p.read_text() for p in (DOCS / "envs").iterdir()}
    stale = sorted(name for name in generated.keys() | committed.keys() if generated.get(name) != committed.get(name))
    assert len(generated) >= 6 and stale == [], (
        f"docs/envs/ {stale} differ from the env modules' docstrings; edit the docstring (the page is generated "
        "from it), then run `python scripts/gen_env_docs.py`")


def test_a_broken_link_anchor_source_link_or_page_outside_the_nav_fails_the_build(tmp_path):
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    docs = tmp_path / "docs"
    (docs / "api").mkdir(parents=True)
    (docs / "index.md").write_text(
        "# Home\n\n[gone](no_such_page.md), [anchor](#no-such-heading), [source](../llm_zoo/spec.py), "
        "[ref][llm_zoo.no_such_name]\n\n## Here\n")
    (docs / "api" / "llm_zoo.md").write_text("# api\n\n::: llm_zoo.spec.register\n")
    (docs / "orphan.md").write_text("# Not in the nav\n")
    config.update(docs_dir=str(docs), nav=[{"Home": "index.md"}, {"API": "api/llm_zoo.md"}])
    python = config["plugins"][1]["mkdocstrings"]["handlers"]["python"]
    python["paths"] = [str(ROOT)]
    python["options"]["extensions"] = [str(ROOT / path) for path in python["options"]["extensions"]]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    done = _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    log = done.stdout + done.stderr
    assert done.returncode != 0, log[-3000:]
    for shown in ("no_such_page.md", "#no-such-heading", "../llm_zoo/spec.py", "llm_zoo.no_such_name", "orphan.md"):
        assert shown in log, f"the build did not report {shown!r}:\n{log[-3000:]}"


# ---------------------------------------------------------------------------------------------
# THE COMMANDS THE PAGES SHOW
# ---------------------------------------------------------------------------------------------


COMMAND = re.compile(r"\s*(llm-zoo\b|python -m llm_zoo\b|torchrun\b.* -m llm_zoo\b|(python )?benchmarks/\w+\.py( |$)"
                     r"|python -m benchmarks\.\w+( |$))")


def shown_commands(text: str) -> list[str]:
    """Return the command lines a page shows: each line of its shell blocks, and each inline code span,
    that runs llm_zoo (``llm-zoo``, ``python -m llm_zoo``, ``torchrun ... -m llm_zoo``) or a benchmark
    script (``python -m benchmarks.NAME ...``, ``python benchmarks/NAME.py ...``; ``benchmarks/NAME.py --flag`` in a
    sentence)."""
    lines = [line for info, body in FENCE.findall(text) if info.strip() in SHELL for line in body.splitlines()]
    prose = FENCE.sub("", text)
    lines += [" ".join(span.split()) for span in SPAN.findall(prose)]
    # a bare benchmarks/NAME.py in a sentence names the file; with python or options it is a command
    return [line.strip() for line in lines if COMMAND.match(line)
            and not re.fullmatch(r"\s*benchmarks/\w+\.py\s*", line)]


def runs(command: str) -> list[dict]:
    """Return what the child runs for a shown command (placeholders filled in): ``{"argv": [...]}`` for
    ``llm-zoo``, ``{"script": path, "argv": [...]}`` for a benchmark script.

    ``llm-zoo play / train`` names two commands, each checked with ``--help``; a bare ``llm-zoo eval``
    (or ``llm-zoo eval ...``, its arguments left out) is checked with ``--help`` too; ``torchrun``'s own
    options are parsed by torchrun's parser.
    """
    for shown, value in PLACEHOLDERS.items():
        command = re.sub(shown, value, command)
    words = [w for w in shlex.split(command, comments=True) if w != "..."]
    if words[:2] == ["python", "-m"] and words[2].startswith("benchmarks."):  # the package's module: its file
        words = ["benchmarks/" + words[2].removeprefix("benchmarks.") + ".py", *words[3:]]
    if words[0] == "python" and words[1].startswith("benchmarks/"):
        words = words[1:]
    if words[0].startswith("benchmarks/"):
        return [{"script": words[0], "argv": words[1:]}]
    if words[0] == "torchrun":
        from torch.distributed.run import get_args_parser

        launch = get_args_parser().parse_args(words[1:])
        assert launch.module and launch.training_script == "llm_zoo", command
        argv = list(launch.training_script_args)
    else:
        argv = words[3:] if words[0] == "python" else words[1:]
    if "/" in argv:
        return [{"argv": [name, "--help"]} for name in argv if name != "/"]
    if len(argv) <= 1 and "--help" not in argv:
        return [{"argv": [*argv, "--help"]}]
    return [{"argv": argv}]


def _check(batch: list[dict]) -> list[dict]:
    done = subprocess.run([sys.executable, str(Path(__file__).resolve())], input=json.dumps(batch), cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _ran(result: dict) -> bool:
    return result["rc"] == 0 or result["reached"] is not None


def test_every_command_the_pages_show_runs():
    batch, seen = [], set()
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:  # the first page too
        preload = PRELOAD.get(page.name, [])
        for command in shown_commands(page.read_text()):
            for run in runs(command):
                key = json.dumps([run, preload])
                if key not in seen:
                    seen.add(key)
                    batch.append({**run, "page": str(page.relative_to(ROOT)), "command": command, "preload": preload})
    failed = []
    for item, result in zip(batch, _check(batch)):
        ok = _ran(result)
        if ok and result["reached"] and result["reached"]["call"] == "train":
            ok = _sets_arrived(item["argv"], result["reached"]["config"])
        if not ok:
            ran = f"{item['script']} {shlex.join(item['argv'])}" if "script" in item else \
                f"llm-zoo {shlex.join(item['argv'])}"
            failed.append(f"{item['page']}: `{item['command']}` (ran as {ran}): {result}")
    assert failed == [], "\n".join(failed)
    shown = {item["argv"][0] for item in batch if "script" not in item}
    assert shown >= {"play", "train", "sft", "eval", "bench"} and sum("script" in item for item in batch) >= 3, batch


def _sets_arrived(argv: list[str], config: dict) -> bool:
    """Whether each ``--set KEY=VALUE`` of the command reached the trainer's config as its value."""
    import yaml

    sets = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "--set"]
    for pair in sets:
        key, _, value = pair.partition("=")
        section, dot, sub = key.partition(".")
        held = config.get(section, {}) if dot else config  # a plug-in's field, SECTION.FIELD, sits in its section
        key = sub if dot else key
        if isinstance(held.get(key), dict) and isinstance(yaml.safe_load(value), dict):  # a section set as a mapping
            if any(held[key].get(k) != v for k, v in yaml.safe_load(value).items()):
                return False
            continue
        if key not in held or held[key] not in (value, yaml.safe_load(value)):
            return False
    return True


def test_the_check_fails_on_an_option_field_env_or_script_that_does_not_exist():
    wrong = [{"argv": ["play", "kuhn_poker_v0", "--p3", "random"]},
             {"argv": ["train", "kuhn_poker_v0", "--set", "no_such_field=1"]},
             {"argv": ["train", "kuhn_poker_v0", "--set", "steps=many"]}, {"argv": ["train", "no_such_env_v0"]},
             {"argv": ["sft", "user_sim_v0", "--role", "assistant", "--set", "epochs=-"]},
             {"argv": ["nosuchcommand", "--help"]}, {"argv": ["bench", "--only", "no_such_script"]},
             {"argv": ["bench", "--only", "learning", "--args", "learning=--no-such-option 1"]},
             {"argv": ["eval", "kuhn_poker_v0"]}, {"script": "benchmarks/learning.py", "argv": ["--no-such-option"]},
             {"script": "benchmarks/no_such_script.py", "argv": []}]
    right = [{"script": "benchmarks/learning.py", "argv": ["--envs", "agentic_judge_v0"]}]
    results = _check([{**run, "preload": []} for run in wrong + right])
    assert [run for run, r in zip(wrong, results) if _ran(r)] == [], f"the check let these through: {results}"
    assert _ran(results[-1]) and "agentic_judge_v0" in str(results[-1]["reached"]["args"]["envs"]), results[-1]
    assert runs("llm-zoo play / train") == [{"argv": ["play", "--help"]}, {"argv": ["train", "--help"]}]
    assert runs("llm-zoo eval ENV --checkpoint DIR") == [{"argv": ["eval", "kuhn_poker_v0", "--checkpoint", SHOWN_DIR]}]
    assert runs("python benchmarks/kuhn_headline.py --out OUT") == [
        {"script": "benchmarks/kuhn_headline.py", "argv": ["--out", "out"]}]
    assert runs("python -m benchmarks.kuhn_headline --out OUT") == [
        {"script": "benchmarks/kuhn_headline.py", "argv": ["--out", "out"]}]
    page = ("Run `llm-zoo\ntrain ENV` (see `benchmarks/x.py`).\n```bash\nllm-zoo eval  # a comment\n```\n"
            "```text\nllm-zoo x\n```\n")
    assert shown_commands(page) == ["llm-zoo eval  # a comment", "llm-zoo train ENV"]


def test_the_home_pages_python_runs():
    (code,) = [body for info, body in FENCE.findall((DOCS / "index.md").read_text()) if info.strip() == "python"]
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    returns = ast.literal_eval(done.stdout.strip().splitlines()[-1])  # the example prints each seat's winnings
    assert set(returns) == {"player_0", "player_1"} and returns["player_0"] == -returns["player_1"] != 0


# ---------------------------------------------------------------------------------------------
# THE CHILD: runs each command through llm_zoo.cli.main, the long calls replaced by a stop
# ---------------------------------------------------------------------------------------------


class _Reached(Exception):  # noqa: N818 - a stop, not an error
    def __init__(self, call: str, **what: object) -> None:
        super().__init__(call)
        self.what = {"call": call, **what}


def _stop_before_long_calls() -> None:
    import dataclasses

    import llm_zoo.bench as bench
    import llm_zoo.crossplay as crossplay
    import llm_zoo.serve as serve
    import llm_zoo.trainers.evaluation as evaluation
    import llm_zoo.trainers.grpo as grpo
    import llm_zoo.trainers.sft as sft

    def config_of(config: object) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(config), default=str))

    def train(config, **kwargs):
        raise _Reached("train", config=config_of(config), **json.loads(json.dumps(kwargs, default=str)))

    def fit(config, **kwargs):
        raise _Reached("sft", config=config_of(config))

    def evaluate_checkpoint(env, checkpoint, **kwargs):
        if not Path(checkpoint).is_dir():
            raise FileNotFoundError(f"no checkpoint directory {checkpoint}")
        raise _Reached("eval", env=env, checkpoint=str(checkpoint))

    def run_script(script, *, extra=(), **kwargs):
        parsed = _parse_script(script, list(extra))  # the script's own parser takes what --args passes
        raise _Reached("bench", script=str(script), extra=list(extra), args=parsed)

    def serve_run(model, **kwargs):
        raise _Reached("serve", model=str(model), **json.loads(json.dumps(kwargs, default=str)))

    def crossplay_run(env, players, **kwargs):
        raise _Reached("crossplay", env=env, players=[str(p) for p in players])

    grpo.train, sft.sft, evaluation.evaluate_checkpoint, bench.run_script = train, fit, evaluate_checkpoint, run_script
    serve.run, crossplay.run = serve_run, crossplay_run


def _parse_script(script: str | Path, argv: list[str]) -> dict:
    """Run a benchmark script as ``python SCRIPT ARGV`` up to its argument parsing; return what it parsed.

    Every script in benchmarks/ parses its arguments with argparse first thing in ``main``; the parse is
    the real one, and the run stops right after it.
    """
    import argparse
    import runpy

    path = ROOT / script
    if not path.is_file():
        raise FileNotFoundError(f"no benchmark script {script}")
    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        parsed = real(self, args, namespace)
        raise _ParsedScript(json.loads(json.dumps(vars(parsed), default=str)))

    saved = sys.argv, list(sys.path)
    sys.argv, sys.path[:0] = [str(path), *argv], [str(path.parent)]
    argparse.ArgumentParser.parse_args = parse_then_stop
    try:
        runpy.run_path(str(path), run_name="__main__")
    except _ParsedScript as stop:
        return stop.parsed
    finally:
        argparse.ArgumentParser.parse_args = real
        sys.argv, sys.path[:] = saved
    raise RuntimeError(f"{script} ended without parsing arguments")


class _ParsedScript(Exception):  # noqa: N818 - a stop, not an error
    def __init__(self, args: dict) -> None:
        super().__init__("parsed")
        self.parsed = args


def _child(batch: list[dict]) -> list[dict]:
    import contextlib
    import importlib
    import io
    import signal
    import tempfile

    from llm_zoo.cli import main

    def too_long(signum, frame):
        raise TimeoutError(f"still running after {COMMAND_SECONDS} s: give this command a stop in "
                           "_stop_before_long_calls, or show a cheaper one")

    signal.signal(signal.SIGALRM, too_long)
    _stop_before_long_calls()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # relative run directories land here
        checkpoint = Path(SHOWN_DIR)
        (checkpoint / "checkpoints" / "step_1").mkdir(parents=True)
        (checkpoint / "checkpoints" / "step_1" / "state.json").write_text("{}")
        (checkpoint / "checkpoints" / "latest").write_text("step_1")
        for item in batch:
            for module in item["preload"]:
                importlib.import_module(module)
            argv = item["argv"]
            if "--resume" in argv and "--run-dir" in argv:
                run = Path(argv[argv.index("--run-dir") + 1]) / "checkpoints"
                (run / "step_1").mkdir(parents=True, exist_ok=True)
                (run / "step_1" / "state.json").write_text("{}")
                (run / "latest").write_text("step_1")
            out, reached = io.StringIO(), None
            stdin, sys.stdin = sys.stdin, io.StringIO("")  # a person at the prompt who types nothing (EOF)
            signal.alarm(COMMAND_SECONDS)  # a command this check has no stop for fails instead of running on
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                    if "script" in item:
                        raise _Reached("script", script=item["script"], args=_parse_script(item["script"], argv))
                    rc = main(argv)
            except SystemExit as exit_:
                rc = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            except _Reached as stop:
                rc, reached = None, stop.what
            except Exception as exc:  # noqa: BLE001 - reported, with the command, to the test
                rc = f"{type(exc).__name__}: {exc}"
            finally:
                signal.alarm(0)
                sys.stdin = stdin
            results.append({"rc": rc, "reached": reached, "output": out.getvalue()[-1500:]})
    return results


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.stdin.read()))))
