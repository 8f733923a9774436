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


def example(name: str) -> str:
    """Return ``examples/<name>.py`` as the page shows it, its blocks joined."""
    return "".join(blocks(f'python title="examples/{name}.py"'))


def write_examples(root: Path, *names: str) -> None:
    """Write the examples as the page shows them into ``root/examples``: nothing else of examples/ is there."""
    (root / "examples").mkdir()
    for name in names:
        (root / "examples" / f"{name}.py").write_text(example(name))


def command(mentioning: str) -> list[str]:
    """Return the page's one shell command that mentions ``mentioning``, as argv for this interpreter."""
    (line,) = [line for body in blocks("bash") for line in body.strip().splitlines() if mentioning in line]
    args = shlex.split(line)
    assert args[:3] == ["python", "-m", "llm_zoo"], line
    return [sys.executable, *args[1:]]


def run(argv: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def llm_zoo_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "llm_zoo", *args], cwd)


def test_the_page_shows_the_example_files_exactly_and_haggle_is_under_100_lines():
    assert example("haggle") == (ROOT / "examples" / "haggle.py").read_text()
    assert len(example("haggle").splitlines()) < 100
    assert example("debate") == (ROOT / "examples" / "debate.py").read_text()


def test_the_pages_code_passes_pettingzoos_tests_and_trains(tmp_path):
    write_examples(tmp_path, "haggle")
    (check,) = blocks("python")
    done = run([sys.executable, "-c", check], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Passed API test" in done.stdout and "deal at" in done.stdout
    # the base logs each reply and the env narrates the offer too, as "What render() shows" says
    assert re.search(r"^seller: offer (\d)$", done.stdout, re.M) and re.search(r"^seller offers \d$", done.stdout, re.M)
    done = run(command("examples.haggle:haggle_v0"), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(r) for r in (tmp_path / "runs" / "haggle" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(math.isfinite(r["losses/loss/main"]) and r["losses/tokens/main"] > 0 for r in rows)
    assert {"charts/reward/seller", "charts/reward/buyer"} <= set(rows[0])
    config = json.loads((tmp_path / "runs" / "haggle" / "config.json").read_text())
    assert config["env"] == "haggle_v0"


def test_a_env_with_no_evaluation_is_refused_by_eval_saying_so(tmp_path):
    write_examples(tmp_path, "haggle")
    done = llm_zoo_cli(tmp_path, "eval", "examples.haggle:haggle_v0", "--checkpoint", "runs/none")
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr[-2000:])
    assert "haggle_v0 has no evaluation: its EnvSpec.evaluate is None" in done.stderr, done.stderr[-2000:]


def test_the_debate_runs_as_the_page_shows_it(tmp_path):
    write_examples(tmp_path, "debate")
    script = """
import warnings

from pettingzoo.test import api_test, render_test, seed_test

import examples.debate
import llm_zoo
from llm_zoo.policies.base import FunctionPolicy
from llm_zoo.trainers.rollout import collect

warnings.simplefilter("ignore")
api_test(llm_zoo.make_env("debate_v0"), num_cycles=10)
seed_test(examples.debate.env)
render_test(examples.debate.env)
spec = llm_zoo.env_spec("debate_v0")
sloppy, judge = spec.scripted["sloppy"](), spec.scripted["judge"]()
wrong, mute = FunctionPolicy(lambda obs: "99"), FunctionPolicy(lambda obs: "no")
# a wrong answer loses, two wrong answers draw, a debater who forfeits loses, a judge who forfeits voids the game
for policies in ({"debater_0": sloppy, "debater_1": wrong, "judge": judge},
                 {"debater_0": wrong, "debater_1": wrong, "judge": judge},
                 {"debater_0": mute, "debater_1": sloppy, "judge": judge},
                 {"debater_0": sloppy, "debater_1": sloppy, "judge": mute}):
    print(sorted(collect("debate_v0", policies, [7])[0].returns.items()))
"""
    done = run([sys.executable, "-c", script], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert "Passed API test" in done.stdout
    assert [eval(line) for line in lines[-4:]] == [  # noqa: S307 - the lists this test's script printed
        [("debater_0", 1.0), ("debater_1", -1.0), ("judge", 0.0)], [("debater_0", 0.0), ("debater_1", 0.0), ("judge", 0.0)],
        [("debater_0", -1.0), ("debater_1", 1.0), ("judge", 0.0)], [("debater_0", 0.0), ("debater_1", 0.0), ("judge", 0.0)]]


def test_the_debate_trains_with_its_judge_frozen_and_evals_the_same_figure_every_time(tmp_path):
    write_examples(tmp_path, "debate")
    done = run(command("examples.debate:debate_v0"), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "runs" / "debate"
    # the judge does not learn: the spec's frozen player sits there, recorded in the run's config, never the learner
    assert json.loads((run_dir / "config.json").read_text())["policies"] == {"judge": "scripted:judge"}
    episodes = [json.loads(line) for path in (run_dir / "samples").iterdir() for line in path.read_text().splitlines()]
    assert episodes and all(e["policies"] == {"debater_0": "main", "debater_1": "main", "judge": "judge"} for e in episodes)
    trained = json.loads((run_dir / "eval.json").read_text())
    assert trained["headline"] == "win_rate" and trained["episodes"] == 64
    low, high = trained["mean_return_interval"]
    assert low < high  # the returns vary: the figure is sampled, so only reseeding makes it reproducible
    (checkpoint,) = (run_dir / "checkpoints").glob("step_*")
    figures = []
    for _ in range(2):
        done = llm_zoo_cli(tmp_path, "eval", "examples.debate:debate_v0", "--checkpoint", str(checkpoint))
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout)
        figures.append({k: result[k] for k in ("metric", "value", "interval", "mean_return", "seeds")})
    assert figures[0] == figures[1] == {"metric": "win_rate", "value": trained["win_rate"],
                                        "interval": trained["interval"], "mean_return": trained["mean_return"],
                                        "seeds": trained["seeds"]}


def test_train_refuses_a_role_that_does_not_learn_and_has_no_player(tmp_path):
    write_examples(tmp_path, "debate")
    done = llm_zoo_cli(tmp_path, "train", "examples.debate:debate_v0", "--run-dir", "runs/refused",
                       "--set", "learn=[judge]", "--set", "progress=false", "--set", "tensorboard=false")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "the roles ['debater'] do not learn" in done.stderr and "frozen_players" in done.stderr
    assert "--set policies='{debater: scripted:NAME}'" in done.stderr, done.stderr[-2000:]
    assert not list((tmp_path / "runs" / "refused").glob("checkpoints/*"))


def test_sfts_closing_hint_is_a_command_that_works(tmp_path):
    write_examples(tmp_path, "debate")
    done = llm_zoo_cli(tmp_path, "sft", "examples.debate:debate_v0", "--role", "debater", "--run-dir", "runs/fit",
                       "--set", "teachers={debater: sloppy}", "--set", "episodes=16", "--set", "epochs=1")
    assert done.returncode == 0, done.stderr[-3000:]
    hint = re.search(r"start RL from it: (llm-zoo train .*)\)$", done.stderr.strip(), re.M)
    assert hint and hint[1] == "llm-zoo train examples.debate:debate_v0 --set init=runs/fit", done.stderr[-1000:]
    small = ["--set", "steps=1", "--set", "episodes_per_step=4", "--set", "rollout_batch_size=4", "--set",
             "max_new_tokens=1", "--set", "eval_every=0", "--set", "progress=false", "--set", "tensorboard=false"]
    done = llm_zoo_cli(tmp_path, *shlex.split(hint[1])[1:], "--run-dir", "runs/rl", *small)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "runs" / "rl" / "config.json").read_text())["init"] == "runs/fit"


def test_an_env_registered_by_its_module_and_by_an_entry_point_is_one_env(tmp_path):
    """The page's two ways of registering together, with a real installed distribution's entry point."""
    write_examples(tmp_path, "debate")
    dist = tmp_path / "my_envs-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-envs\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[llm_zoo.envs]\ndebate_v0 = examples.debate:SPEC\n")
    script = """
import pettingzoo

import llm_zoo

# after `import llm_zoo` alone: in both registries, its module not yet loaded
assert "debate_v0" in llm_zoo.registered() and "llm_zoo/debate-v0" in pettingzoo.aec_registry
import sys
assert "examples.debate" not in sys.modules
import examples.debate  # registers itself too: the same spec, no error

assert llm_zoo.env_spec("debate_v0") is examples.debate.SPEC
print(pettingzoo.make("aec", "llm_zoo/debate-v0").unwrapped.metadata["name"])
"""
    done = run([sys.executable, "-c", script], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["debate_v0"]
    # and by name alone on the command line: the entry point finds it, and its module registers it again
    done = llm_zoo_cli(tmp_path, "train", "debate_v0", "--set", "learn=[judge]", "--run-dir", "runs/by_name")
    assert done.returncode == 2 and "debate_v0: the roles ['debater'] do not learn" in done.stderr, done.stderr[-2000:]
