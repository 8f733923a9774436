"""llm_zoo's GRPO trainer beside TRL's GRPOTrainer: the same single-turn task, model and loss, one run, one CPU.

The task is Kuhn poker's first decision of each seat, as a prompt set: the 9 prompts the
kuhn_poker_v0 env writes when it first asks a player for a move (player_0 holding J, Q or K
with nothing played; player_1 holding J, Q or K after player_0 checked, or after it bet). A reply
earns the exact expected payoff of the move it names against a fixed opponent (:data:`OPPONENT`, a
tabular strategy: it always bets and calls with K, never bets with Q and calls with it half the
time, bluffs J a third of the time and never calls with it), with the rest of the hand played out
exactly: the opponent's moves by its table, the learner's one later decision (player_0 facing a
bet after checking) by the best reply to that table. :func:`move_values` computes it by
enumeration over the opponent's cards, weighted by how likely each is to have produced what the
prompt shows, on the env's own rules (:mod:`llm_zoo.envs.kuhn_poker.rules`). A reply that the
env's parser (``text.parse_move``: lenient about wording, strict about naming exactly one legal
move) cannot read scores -2, the worst payoff of a hand, so that no unreadable reply pays more
than a legal move. The best reachable mean reward is :func:`best_mean_reward` (the mean over the
9 prompts of the better move's value).

Both trainers get:

- the same tiny model: the trainer's own ``build_tokenizer_and_model`` (``llm_zoo.models``, a Llama
  built from a config, word-level tokenizer over Kuhn's corpus), same seed, so the same initial
  weights; the same chat template and the same prompt token ids;
- the same prompts in the same order: the env seeds that ``llm_zoo.trainers.grpo.train`` draws at
  each step (one per group) are computed beforehand (:func:`planned_seeds`), and TRL's dataset
  holds the very observation the env shows for each seed, in that order (``shuffle_dataset=False``);
  after the run the script checks that both sides saw exactly those prompts (``same_prompts``);
- the same group size, completions per step (one generation batch per optimiser step, one
  update per batch: ``num_iterations=1``), ``max_new_tokens``, temperature 1 and top-p 1, AdamW at
  the same constant learning rate with no weight decay and no warm-up, gradients clipped at norm 1;
- the same loss: GRPO advantages normalised within each group (``(r - mean) / (std + 1e-4)``), the
  clipped importance ratio with epsilon 0.2 on both sides, no KL term (``beta=0``, no reference
  model), no entropy bonus, and token-level aggregation: the mean over every completion token of
  the step. That is llm_zoo's ``aggregation="token"`` and TRL's ``loss_type="dapo"`` (normalised
  by the number of active tokens in the global accumulated batch; with one process and no
  gradient accumulation, the step's completion tokens);
- one torch thread (``torch.set_num_threads(1)``, and ``threads=1`` in llm_zoo's config).

Our side runs :func:`llm_zoo.trainers.grpo.train` itself, end to end, on a one-turn env registered
here (``kuhn_first_move_v0``, an :class:`~llm_zoo.spec.EnvSpec` as docs/writing_an_env.md shows):
each episode is one prompt and one reply, the episode seed picks the prompt, and the env's reward
is the reply's value. So our measured time holds everything a user of ``llm-zoo train`` pays for:
the env steps, the episode records, rollout batching, metrics logging and the final checkpoint.
TRL's side is ``GRPOTrainer(...).train()`` with a reward function that reads the completion with
the same parser and the same values. Both are timed end to end (construction included; our
``train`` also builds its model, which TRL gets built), and per step by each one's own clock
(llm_zoo's ``perf/step_s``; TRL's ``on_step_begin`` to ``on_step_end``, generation included).

The reward curve is each step's mean training reward against completions (the same prompts on
both sides, so the prompt mix moves both curves alike); after training both final models are
scored by the same sampler on every prompt (256 replies each in the full setting, the same seed).
Each seed (3 by default) changes the initial weights, the prompts and both samplers' streams, and
both trainers run it, the first to run alternating from seed to seed so that a change in the
machine's load falls on both. "No worse" is read from paired differences (ours - TRL's): the mean
over steps of the step rewards' difference, and the final rewards' difference, each averaged over
the seeds; neither may be below 0 by two standard errors (the seeds' spread; with one seed, the
steps' or the samples').

Two checks say the two run the same work, besides ``same_prompts`` and ``same_prompt_ids``:
:func:`loss_gradient_check` feeds one batch (same tokens, same advantages) to our
:func:`~llm_zoo.trainers.grpo.update` and to TRL's ``compute_loss``: the gradients agree to
float rounding (relative difference 2e-6 at the full setting); and the two samplers draw from one
distribution (measured once, 3600 replies of the initial model each: llm_zoo's sampler 11.0% legal
replies, mean reward -1.784; ``model.generate`` 10.9%, -1.779). So the curves differ by sampling
noise alone, and that noise is large here: at the full setting each trainer ends, seed by seed,
either near the best policy (about 0), at "fold at every bet" (about -0.27: the card is read
after a check but not facing a bet), or at "check everywhere" (about -0.65: every facing-a-bet
prompt unreadable), and which one depends on the seed's draws, for either trainer alike.

What the comparison cannot remove:

- the generation path: TRL samples with ``model.generate`` over a left-padded batch of whole
  prompts; llm_zoo samples with its own KV-cached loop, which runs each distinct prompt (and each
  shared prefix) once (``TransformersPolicy``'s ``share_prefix``) and keeps the sampling
  log-probs, so its loss needs no second pass for them (TRL, at ``num_iterations=1``, uses the
  detached current log-probs as the old ones: the same value, ratio 1, in both);
- TRL's machinery around the step: ``transformers.Trainer``'s loop, ``accelerate``'s wrapping, the
  ``datasets`` dataloader and its collation, TRL's metrics gathering and logging every
  ``logging_steps`` (its default, 10); llm_zoo's: the env and episode records, per-step metrics in
  ``metrics.jsonl``, and a checkpoint at the end;
- the group std: TRL divides by the sample std (Bessel's correction), llm_zoo by the population
  std, so TRL's advantages are llm_zoo's times ``sqrt((G - 1) / G)`` (0.935 at G = 8): a constant
  scale, which AdamW all but cancels (not quite: the gradient clip at norm 1 sees the scale);
- randomness: each samples from its own random stream, so the completions differ; the rewards,
  prompts and initial weights do not.

The pretrained row (``--model smollm2-135m`` or ``--model DIR``, a catalogue name or a model
directory): the same task, prompts, group size, completions per step and loss, on a pretrained model
that both sides load (float32, one thread), through that model's own chat template (``same_prompt_ids``
still checks the token ids). With ``--lora-r N`` (default 8) both train LoRA adapters alone, of the
same rank, alpha, dropout and target modules (``--lora-alpha``, ``--lora-dropout``,
``--lora-target-modules``; default every linear layer of the decoder blocks): ours through
``grpo.train``'s ``lora_r``/``lora_alpha``/... (``llm_zoo.models.add_lora``), TRL's through
``GRPOTrainer(..., peft_config=peft.LoraConfig(...))`` on the base model. peft starts B at zero, so
both start from the same policy; the A matrices are drawn from each side's own random stream.
:func:`loss_gradient_check` runs on the LoRA model (the adapters' gradients), and :func:`adapter_figures`
checks that each side trained its adapters alone: every trained weight a LoRA matrix, the base
unchanged, the adapters moved (``adapters_only`` in the JSON line). Our side runs with
``max_prompt_tokens`` :data:`MAX_PROMPT_TOKENS` and ``memory_limit_gb`` :data:`MEMORY_LIMIT_GB` (the
preflight sizes the update by the prompt limit). It starts from the ``pretrained`` setting (``--quick``:
``pretrained_quick``); the flags override it. The table's last column and the JSON line's ``model_label``
name the model and the LoRA setting of the row.

One difference belongs to the trainer, not to the setting: llm_zoo runs no forward or backward pass
for completions whose group's rewards are all equal (no advantage, no gradient; the step's update is
the same), and TRL runs them; the share it skipped is printed (``llm_zoo_skipped_fraction``). With a
pretrained model that rarely names a move at first, that is most completions, so it is part of the speed.

Measured with SmolLM2-135M-Instruct (this project's 2-core CPU, shared, load 3-15), ``--model smollm2-135m
--lora-r 8 --seeds 2 --steps 16 --group-size 8 --prompts-per-step 2 --max-new-tokens 8``: 3.24 against 0.56
completions/s, 5.8x (5.4x-6.4x by seed; llm_zoo skipped 48% of the completions' update; its step 2.5 s
sampling and 2.4 s the rest, TRL's 7.2 s ``model.generate`` and 21.5 s the rest); the curve's difference
+0.29 ± 0.55, the final reward -0.41 against -0.28 (difference -0.13 ± 0.42): no worse by the test above,
though two seeds of 16 steps cannot tell the two curves apart; peak RSS 7.5 GB; 19.5 min. Both start
near -2 (2-8% of the model's first replies name a move, for either sampler) and end with 70-86% legal replies.

    python -m benchmarks.trainer_vs_trl             # the full setting, 3 seeds: 9-14 min on 2 busy cores
    python -m benchmarks.trainer_vs_trl --seeds 1   # one seed: 3-5 min
    python -m benchmarks.trainer_vs_trl --quick     # the smallest setting, one seed: seconds
    python -m benchmarks.trainer_vs_trl --out DIR   # where the plot and the figures go (default: a temp folder)
    python -m benchmarks.trainer_vs_trl --model smollm2-135m --lora-r 8   # the pretrained row: 3-4 min

Prints the settings, the move values, a table per seed and pooled (seconds per step, completions
per second, the reward over the last quarter of completions, the final sampled reward), where each
step's time goes, the reward differences and the checks, and the reward curve; writes
``trainer_vs_trl.png`` (and ``figures.json``) under ``--out``, and ends with one JSON line. The goal
(issue 20): at least 2x TRL's completions per second, with a reward curve no worse. Measured
(2026-12-01, full setting, 3 seeds, this project's 2-core CPU at load 6.7-8.2): 553 against 74
completions/s, 7.4x (6.3x-8.6x by seed; 7.5x in a run at load 8-12); final reward -0.203 against
-0.202, difference -0.002 ± 0.18. Both sides are deterministic given the seed: the two runs gave
the same rewards to the last digit.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llm_zoo
from benchmarks import _harness as harness
from llm_zoo.envs.core import FastOrderEnforcingWrapper, InvalidReply, TextEnv
from llm_zoo.envs.kuhn_poker import text, theory
from llm_zoo.envs.kuhn_poker.rules import CARDS, Hand, Move
from llm_zoo.spec import EnvSpec

ENV_ID = "kuhn_first_move_v0"
GOAL_SPEEDUP = 2.0
INVALID_REWARD = -2.0
"""An unreadable reply: the worst payoff of a Kuhn hand, so it never pays more than a legal move."""

OPPONENT = theory.validate_policy({
    # as player_0, first to act
    "J:": {"check": 2 / 3, "bet": 1 / 3}, "Q:": {"check": 1.0, "bet": 0.0}, "K:": {"check": 1 / 3, "bet": 2 / 3},
    # as player_0, facing a bet after its check
    "J:check,bet": {"call": 0.0, "fold": 1.0}, "Q:check,bet": {"call": 0.5, "fold": 0.5},
    "K:check,bet": {"call": 1.0, "fold": 0.0},
    # as player_1, after a check
    "J:check": {"check": 2 / 3, "bet": 1 / 3}, "Q:check": {"check": 1.0, "bet": 0.0}, "K:check": {"check": 0.0, "bet": 1.0},
    # as player_1, facing a bet
    "J:bet": {"call": 0.0, "fold": 1.0}, "Q:bet": {"call": 0.5, "fold": 0.5}, "K:bet": {"call": 1.0, "fold": 0.0},
})
"""The fixed opponent, a tabular strategy over Kuhn's 12 info sets (theory's format); it is exploitable."""


@dataclass(frozen=True)
class Setting:
    """One size of the comparison; both trainers run it."""

    steps: int
    prompts_per_step: int
    group_size: int
    max_new_tokens: int
    lr: float
    hidden_size: int
    layers: int
    init_std: float
    zero_head: bool
    eval_samples: int
    model: str = "tiny"
    """``tiny`` (the tiny model above, built from a config), or a pretrained model: a catalogue name
    (``smollm2-135m``) or a model directory, which both sides load (the width fields are then unused)."""
    lora_r: int = 0
    """0: every weight trains; above 0: LoRA adapters of this rank on the pretrained model, on both sides."""
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    lora_target_modules: tuple[str, ...] = ()
    """Empty: every linear layer of the decoder blocks (``llm_zoo.models.LORA_DEFAULT_TARGETS``), on both sides."""

    @property
    def completions_per_step(self) -> int:
        return self.prompts_per_step * self.group_size

    @property
    def pretrained(self) -> bool:
        return self.model != "tiny"

    @property
    def targets(self) -> list[str] | str:
        """What the adapters wrap, as peft's ``LoraConfig(target_modules=...)`` takes it on both sides."""
        from llm_zoo.models import LORA_DEFAULT_TARGETS

        return list(self.lora_target_modules) or LORA_DEFAULT_TARGETS

    @property
    def label(self) -> str:
        """The model and the LoRA setting, as the table and the JSON line name them."""
        if not self.pretrained:
            return f"tiny llama {self.hidden_size}x{self.layers}"
        name = self.model if self.model in _catalogue_names() else Path(self.model).name
        if not self.lora_r:
            return f"{name}, full fine-tuning"
        return (f"{name}, LoRA r{self.lora_r} alpha {self.lora_alpha:g} dropout {self.lora_dropout:g} on "
                f"{','.join(self.lora_target_modules) or 'all-linear'}")


def _catalogue_names() -> list[str]:
    from llm_zoo.catalogue import CATALOGUE

    return sorted(CATALOGUE)


SETTINGS = {
    "full": Setting(steps=150, prompts_per_step=9, group_size=8, max_new_tokens=4, lr=1e-3, hidden_size=128,
                    layers=2, init_std=0.125, zero_head=False, eval_samples=256),
    "quick": Setting(steps=2, prompts_per_step=2, group_size=4, max_new_tokens=2, lr=1e-3, hidden_size=32,
                     layers=1, init_std=0.02, zero_head=False, eval_samples=4),
    "pretrained": Setting(steps=10, prompts_per_step=2, group_size=4, max_new_tokens=8, lr=5e-4, hidden_size=0,
                          layers=0, init_std=0.0, zero_head=False, eval_samples=8, lora_r=8),
    "pretrained_quick": Setting(steps=2, prompts_per_step=2, group_size=2, max_new_tokens=4, lr=5e-4, hidden_size=0,
                                layers=0, init_std=0.0, zero_head=False, eval_samples=2, lora_r=8),
}
"""``full`` is the default; ``--quick`` runs ``quick``; flags override single fields.

``full``'s model is the Kuhn main job's width and initialisation (hidden size 128, init std 0.125;
``presets.KUHN_POKER_V0``) without its zero output layer. Measured on our side (seed 0, 150 steps):
with init std 0.02, or with the zero output layer, the model's first replies hardly depend on the
prompt, and both trainers collapse onto ``[check]`` at every prompt (final reward -0.648: the three
facing-a-bet prompts unreadable; TRL's run at 0.02 ended at -0.608, valid 0.66, the same collapse);
at 0.125 every reply becomes legal (-0.27). lr 3e-4 (300 steps) and groups of 16 end at the same
policy; lr 3e-3 collapses.

``pretrained`` (and ``pretrained_quick`` with ``--quick``) is the base when ``--model`` names a pretrained
model: a setting that runs in minutes a side on this CPU (a 135M model, one thread), LoRA of rank 8 at
lr 5e-4 (LoRA takes about ten times full fine-tuning's rate), replies of up to 8 tokens (a pretrained
tokenizer spells ``[check]`` in several). Not tuned: the row measures speed and the curve's start, not
where a long run ends."""

MAX_PROMPT_TOKENS = 128
"""Our side's ``max_prompt_tokens`` on a pretrained model: the nine prompts are 93-99 tokens in SmolLM2's template
(:func:`run_ours` refuses a model whose template makes one longer)."""

MEMORY_LIMIT_GB = 8.0
"""Our side's ``memory_limit_gb`` on a pretrained model: the preflight's estimate for one step's update in one pass
(as TRL takes it: a micro-batch of the whole step) is over its default 3.5 GiB for SmolLM2-135M at 8 completions a
step; the run's measured peak is what ``/usr/bin/time -v`` reports."""

ENV_KWARGS = {"rules_in_prompt": False}
"""The prompts of the Kuhn main job (``presets.KUHN_POKER_V0``): the reply format, not the rules."""


# ---------------------------------------------------------------------------------------------
# THE TASK: Kuhn's first decisions, each move worth its exact expected payoff against OPPONENT
# ---------------------------------------------------------------------------------------------

DECISIONS: tuple[tuple[int, int, tuple[Move, ...]], ...] = tuple(
    (seat, card, history) for seat, history in ((0, ()), (1, (Move.CHECK,)), (1, (Move.BET,)))
    for card in range(len(CARDS)))
"""(seat, card, moves before it) of each prompt: player_0's first move, player_1's after a check, after a bet."""


def _hand(seat: int, card: int, other: int, history: tuple[Move, ...]) -> Hand:
    return Hand((card, other) if seat == 0 else (other, card), history)


def _value(seat: int, card: int, history: tuple[Move, ...], weights: Mapping[int, float]) -> float:
    """Return the learner's payoff summed over the opponent's cards (``weights``: card -> reach weight),
    the opponent playing OPPONENT and the learner its best reply at any later decision."""
    probe = _hand(seat, card, next(iter(weights)), history)
    if probe.is_terminal:
        return sum(w * _hand(seat, card, other, history).payoff * (1 if seat == 0 else -1)
                   for other, w in weights.items())
    if probe.to_act == seat:  # the learner's info set is its card and the history: one choice for every weight
        return max(_value(seat, card, (*history, m), weights) for m in probe.legal_moves)
    total = 0.0
    for move in probe.legal_moves:
        after = {other: w * OPPONENT[_hand(seat, card, other, history).info_set(1 - seat)][move.value]
                 for other, w in weights.items()}
        total += _value(seat, card, (*history, move), after)
    return total


def move_values(seat: int, card: int, history: tuple[Move, ...]) -> dict[Move, float]:
    """Return the exact expected payoff of each legal move of a decision against OPPONENT."""
    weights = {}
    for other in range(len(CARDS)):
        if other != card:  # the deal (1/2 each), times the opponent's probability of the moves shown
            w = 0.5
            for i, move in enumerate(history):
                w *= OPPONENT[_hand(seat, card, other, history[:i]).info_set(1 - seat)][move.value]
            weights[other] = w
    total = sum(weights.values())
    legal = _hand(seat, card, next(iter(weights)), history).legal_moves
    return {m: _value(seat, card, (*history, m), weights) / total for m in legal}


VALUES: tuple[dict[Move, float], ...] = tuple(move_values(*d) for d in DECISIONS)
"""Per decision: move -> its exact value."""


def best_mean_reward() -> float:
    """Return the mean over the decisions of the best move's value: the most any policy can earn."""
    return statistics.fmean(max(v.values()) for v in VALUES)


def reward_of(reply: str, decision: int) -> float:
    """Return what a reply earns at a decision: its move's value, or INVALID_REWARD if it names no legal move."""
    values = VALUES[decision]
    move = text.parse_move(reply, tuple(values))
    return INVALID_REWARD if move is None else values[move]


@functools.cache
def _decision_messages(decision: int, rules_in_prompt: bool) -> tuple[tuple[str, str], ...]:
    seat, card, history = DECISIONS[decision]
    other = (card + 1) % len(CARDS)  # the opponent's card is never shown before the showdown
    cards = (card, other) if seat == 0 else (other, card)
    env = llm_zoo.make_env("kuhn_poker_v0", num_hands=1, rules_in_prompt=rules_in_prompt)
    env.reset(seed=0, options={"deal": [cards]})
    for move in history:
        env.step(text.reply_for(move))
    agent = env.agent_selection
    if agent != f"player_{seat}":
        raise AssertionError(f"decision {decision}: expected player_{seat} to act, got {agent}")
    return tuple((m["role"], m["content"]) for m in env.observe(agent)["messages"])


def decision_messages(decision: int, env_kwargs: Mapping[str, Any]) -> tuple[dict[str, str], ...]:
    """Return the chat messages the kuhn_poker_v0 env shows at a decision (played there, one hand)."""
    rules = bool(env_kwargs.get("rules_in_prompt", True))
    return tuple({"role": role, "content": content} for role, content in _decision_messages(decision, rules))


# ---------------------------------------------------------------------------------------------
# THE ONE-TURN ENV that llm_zoo's trainer runs
# ---------------------------------------------------------------------------------------------

SERVED: list[int] = []
"""Every seed a kuhn_first_move_v0 env was reset with in this process: which prompts our side saw."""


class raw_env(TextEnv):  # noqa: N801 - PettingZoo's name for the unwrapped env
    """One Kuhn decision per episode: the seed picks the prompt, the reply's move earns its value."""

    metadata = {"render_modes": ["human", "ansi"], "name": ENV_ID, "is_parallelizable": False}
    possible_agents = ["player"]

    def __init__(self, *, rules_in_prompt: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("max_retries", 0)  # one reply: an unreadable one forfeits at INVALID_REWARD
        super().__init__(**kwargs)
        self.rules_in_prompt = bool(rules_in_prompt)

    def system_prompt(self, agent: str) -> str:
        return self._shown[0][1]

    def start(self, rng: random.Random, options: Mapping[str, Any] | None) -> str:
        SERVED.append(self.episode_seed)
        self.decision = decision_of(rng)
        self._shown = _decision_messages(self.decision, self.rules_in_prompt)
        for role, content in self._shown[1:]:
            self.tell("player", content, role=role)
        seat, card, history = DECISIONS[self.decision]
        self.infos["player"]["info_set"] = _hand(seat, card, (card + 1) % 3, history).info_set(seat)
        return "player"

    def parse(self, agent: str, reply: str) -> Move:
        legal = tuple(VALUES[self.decision])
        move = text.parse_move(reply, legal)
        if move is None:
            raise InvalidReply(text.invalid_feedback(reply, legal))
        return move

    def play(self, agent: str, move: Move) -> None:
        self.end({"player": VALUES[self.decision][move]}, move=move.value)

    def forfeit_rewards(self, agent: str) -> dict[str, float]:
        return {agent: INVALID_REWARD}


def decision_of(rng: random.Random) -> int:
    """Return the decision an episode plays: the first draw of the env's seeded RNG."""
    return rng.randrange(len(DECISIONS))


def env(**kwargs: Any) -> FastOrderEnforcingWrapper:
    """Make the one-turn env with the standard wrappers."""
    return FastOrderEnforcingWrapper(raw_env(**kwargs))


SPEC = llm_zoo.register(EnvSpec(name=ENV_ID, env=env, roles=("player",), corpus=text.corpus,
                                description="Kuhn poker's first decisions, one reply each, scored by exact value"),
                        replace=True)


# ---------------------------------------------------------------------------------------------
# THE TWO RUNS
# ---------------------------------------------------------------------------------------------


def our_config(setting: Setting, seed: int, run_dir: Path):
    """Return the TrainConfig of our side (every matched setting named)."""
    from llm_zoo.trainers.grpo import make_config

    batch = setting.completions_per_step
    model = ({"model": "tiny", "model_hidden_size": setting.hidden_size, "model_layers": setting.layers,
              "model_init_std": setting.init_std, "model_zero_head": setting.zero_head} if not setting.pretrained
             # a pretrained model: its prompts here are under 100 tokens, and the memory preflight sizes the update
             # by max_prompt_tokens (default 4096), so it is set near what runs; a longer prompt would fail loudly
             else {"model": setting.model, "dtype": "float32", "max_prompt_tokens": MAX_PROMPT_TOKENS,
                   "memory_limit_gb": MEMORY_LIMIT_GB,
                   "lora_r": setting.lora_r,
                   "lora_alpha": setting.lora_alpha, "lora_dropout": setting.lora_dropout,
                   "lora_target_modules": list(setting.lora_target_modules)})
    return make_config(ENV_ID, {
        "seed": seed, "steps": setting.steps, "episodes_per_step": batch, "group_size": setting.group_size,
        "algorithm": "grpo", "baseline_key": "role", "env_kwargs": dict(ENV_KWARGS), **model,
        "temperature": 1.0, "top_p": 1.0, "max_new_tokens": setting.max_new_tokens, "constrain_to_legal": False,
        "optimizer": "adamw",  # TRL's (the Kuhn main job's own is SGD)
        "lr": setting.lr, "lr_schedule": "constant", "warmup_steps": 0, "epsilon_low": 0.2, "epsilon_high": 0.2,
        "aggregation": "token", "beta": 0.0, "entropy_coef": 0.0,
        "micro_batch_size": batch, "rollout_batch_size": batch,  # one forward/backward and one sampling call per step
        "run_dir": str(run_dir), "eval_every": 0, "checkpoint_every": 0, "sample_every": 0,
        "progress": False, "tensorboard": False, "threads": 1, "device": "cpu",
    })


def planned_seeds(config) -> list[list[int]]:
    """Return, per step, the env seeds (one per group) that ``grpo.train`` draws for ``config``.

    The same draws as the ROLLOUT phase of :func:`llm_zoo.trainers.grpo.train`; the run checks
    them against the seeds its envs were reset with (:data:`SERVED`).
    """
    from llm_zoo.trainers.grpo import step_rng

    out = []
    for step in range(config.steps):
        rng = step_rng(config.seed, step, "rollout")
        out.append([rng.randrange(2**31) for _ in range(config.episodes_per_step // config.group_size)])
    return out


def run_ours(config) -> dict[str, Any]:
    """Train with llm_zoo's trainer; return its timings, per-step rewards and the final model."""
    from llm_zoo.policies.transformers import TransformersPolicy
    from llm_zoo.trainers.grpo import train
    from llm_zoo.trainers.logging import read_metrics

    SERVED.clear()
    started = time.perf_counter()
    train(config, overwrite=True)  # the benchmark owns its --out: a rerun trains anew
    wall = time.perf_counter() - started
    rows = read_metrics(config.run_dir)
    final = sorted(Path(config.run_dir).glob("checkpoints/*/policies/main")) or sorted(
        Path(config.run_dir).glob("**/policies/main"))
    policy = TransformersPolicy.from_pretrained(final[-1], device="cpu")
    prompt_ids = our_prompt_ids(policy)
    if config.model != "tiny" and max(map(len, prompt_ids)) > config.max_prompt_tokens:
        raise ValueError(f"{config.model}'s chat template makes a prompt of {max(map(len, prompt_ids))} tokens, over "
                         f"the max_prompt_tokens={config.max_prompt_tokens} our side ran with (those episodes failed); "
                         f"raise MAX_PROMPT_TOKENS in benchmarks/trainer_vs_trl.py")
    adapters = None
    if config.lora_r:  # the checkpoint holds what trained: with LoRA, adapters alone over the base it names
        from safetensors.torch import load_file

        from llm_zoo.models import is_adapter_dir

        saved = load_file(final[-1] / "adapter_model.safetensors") if is_adapter_dir(final[-1]) else {}
        adapters = adapter_figures(saved, base_unchanged=bool(saved))
    return {"prompt_ids": prompt_ids, "wall_s": wall, "step_s": [r["perf/step_s"] for r in rows],
            "sample_s": [r["perf/rollout_s"] for r in rows],
            "rewards": [r["charts/reward/player"] for r in rows], "model": policy.model,
            "tokenizer": policy.tokenizer, "served": list(SERVED), "adapters": adapters,
            # completions whose group's rewards were all equal: no advantage, so no forward or backward pass for them
            "skipped": sum(r.get("losses/skipped_samples/main", 0.0) for r in rows)}


def adapter_figures(trained: Mapping[str, Any], base_unchanged: bool) -> dict[str, Any]:
    """Return whether a LoRA run trained its adapters only, from the weights it trained by name.

    ``adapters_only``: every trained weight is a LoRA matrix, there is at least one, the base
    weights did not move (``base_unchanged``), and the adapters did: their B matrices, which
    peft starts at zero, are not all zero any more (``lora_b_norm``).
    """
    names = list(trained)
    b_norm = math.sqrt(sum(float(t.detach().double().pow(2).sum()) for n, t in trained.items() if "lora_B" in n))
    only = bool(names) and all("lora_" in n for n in names)
    return {"adapters_only": only and base_unchanged and b_norm > 0, "trained_weights": len(names),
            "all_lora": only, "base_unchanged": base_unchanged, "lora_b_norm": b_norm}


def lora_config(setting: Setting):
    """Return TRL's ``peft.LoraConfig``: the same rank, scale, dropout and targets llm_zoo's ``add_lora`` uses."""
    from peft import LoraConfig

    return LoraConfig(r=setting.lora_r, lora_alpha=setting.lora_alpha, lora_dropout=setting.lora_dropout,
                      target_modules=setting.targets, task_type="CAUSAL_LM")


def run_trl(config, setting: Setting, seeds: Sequence[Sequence[int]], out: Path) -> dict[str, Any]:
    """Train with TRL's GRPOTrainer on the same prompts; return its timings, per-step rewards and the model."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from llm_zoo.trainers.grpo import build_tokenizer_and_model

    probe = env(**config.env_kwargs)
    rows = []
    for seed in (s for step in seeds for s in step):
        probe.reset(seed=seed)
        rows.append({"prompt": [dict(m) for m in probe.observe("player")["messages"]],
                     "decision": probe.unwrapped.decision})
    SERVED.clear()  # the probe's resets are not our trainer's
    dataset = Dataset.from_list(rows)
    # our learner "main" is built with seed + 0; with LoRA TRL gets the base model and wraps it itself (peft_config)
    tokenizer, model = build_tokenizer_and_model(dataclasses.replace(config, lora_r=0), seed=config.seed)
    peft_config = lora_config(setting) if setting.lora_r else None
    base_weights = list(model.parameters())
    base_sums = [float(p.detach().double().sum()) for p in base_weights] if peft_config else []
    generate_s: list[float] = []
    fed: set[tuple[int, ...]] = set()
    generate = model.generate

    def timed_generate(*args: Any, **kwargs: Any) -> Any:  # where TRL's step goes: its sampling, and the rest
        # and the prompts' token ids as TRL fed them (left-padded rows, less their padding)
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if ids is not None and mask is not None:
            fed.update(tuple(t for t, m in zip(row, keep) if m) for row, keep in zip(ids.tolist(), mask.tolist()))
        t0 = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            generate_s.append(time.perf_counter() - t0)

    model.generate = timed_generate
    step_rewards: list[float] = []
    seen: list[list[int]] = []

    def kuhn_value(prompts, completions, decision, **_: Any) -> list[float]:
        replies = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        rewards = [reward_of(r, d) for r, d in zip(replies, decision)]
        step_rewards.append(statistics.fmean(rewards))
        seen.append(list(decision))
        return rewards

    step_s: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            step_s.append(time.perf_counter() - self.t0)

    args = GRPOConfig(
        output_dir=str(out / "trl"), seed=config.seed, max_steps=setting.steps,
        per_device_train_batch_size=setting.completions_per_step, gradient_accumulation_steps=1,
        num_generations=setting.group_size, num_iterations=1, shuffle_dataset=False,
        max_completion_length=setting.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=setting.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, beta=0.0, epsilon=0.2, epsilon_high=0.2, loss_type="dapo", scale_rewards="group",
        entropy_coef=0.0, mask_truncated_completions=False,
        use_cpu=True, bf16=False, gradient_checkpointing=False,  # float32 on the CPU, as ours
        save_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0,
        remove_unused_columns=False)
    started = time.perf_counter()
    trainer = GRPOTrainer(model=model, reward_funcs=kuhn_value, args=args, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[Clock()], peft_config=peft_config)
    trainer.remove_callback(PrinterCallback)  # its dict of metrics every logging_steps would break up the table
    trainer.train()
    wall = time.perf_counter() - started
    del model.generate  # back to the class's method
    adapters = None
    if peft_config:  # what had gradients, and whether the base weights (the same tensors, wrapped) moved
        trained = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
        same = [float(p.detach().double().sum()) for p in base_weights] == base_sums
        adapters = adapter_figures(trained, base_unchanged=same)
    return {"wall_s": wall, "step_s": step_s, "sample_s": generate_s, "rewards": step_rewards, "model": trainer.model,
            "tokenizer": tokenizer, "seen": seen, "prompt_ids": sorted(fed) or None, "adapters": adapters}


def our_prompt_ids(policy) -> list[list[int]]:
    """Return the token ids our sampler feeds the model for each decision's prompt, by decision."""
    return policy.encode_prompts([{"messages": decision_messages(d, ENV_KWARGS)} for d in range(len(DECISIONS))])


def loss_gradient_check(setting: Setting, seed: int, out: Path) -> float | None:
    """Return the relative difference between the two trainers' loss gradients on one batch (None if TRL's API moved).

    One batch sampled from the initial model (every prompt, a group each), with our GRPO advantages;
    our side is :func:`llm_zoo.trainers.grpo.update` itself (with an optimiser of learning rate 0,
    its gradient read back from before its clip at norm 1), TRL's side its ``GRPOTrainer.compute_loss``
    (the public method ``Trainer.training_step`` calls) on the same tokens and advantages. Equal to float rounding means the same loss: the
    same log-probs, ratio, clipping and token-level normalisation.

    With LoRA both see one model with adapters (``llm_zoo.models.add_lora``, as our trainer builds it),
    and the gradients compared are the adapters' (the only weights with any); its dropout is set to 0
    for the check, so that one batch has one loss. A pretrained model's batch is the first
    ``prompts_per_step`` decisions, a group each (all nine for the tiny model). Where every group's rewards
    are equal (no advantage, no gradient), the advantages come from a stand-in reward: each reply's place in its group.
    """
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from llm_zoo.policies.transformers import TransformersPolicy
    from llm_zoo.scoring import left_pad, right_pad
    from llm_zoo.trainers import advantages
    from llm_zoo.trainers.grpo import Learner, Sample, build_tokenizer_and_model, update

    if setting.lora_r:
        setting = dataclasses.replace(setting, lora_dropout=0.0)
    config = our_config(setting, seed, out / "gradient-check")
    tokenizer, model = build_tokenizer_and_model(config, seed=seed)
    policy = TransformersPolicy(model, tokenizer, max_new_tokens=setting.max_new_tokens, seed=seed, device="cpu")
    prompts = min(len(DECISIONS), setting.prompts_per_step) if setting.pretrained else len(DECISIONS)
    decisions = [d for d in range(prompts) for _ in range(setting.group_size)]
    replies = policy.act([{"messages": decision_messages(d, ENV_KWARGS)} for d in decisions])
    advantage = advantages.grpo([reward_of(r.text, d) for r, d in zip(replies, decisions)], decisions)
    if not any(advantage):  # every group's rewards equal (a model that reads no move yet): no gradient to compare,
        # so advantages from a stand-in reward, the reply's place in its group (the loss is checked, not the task)
        advantage = advantages.grpo([float(i % setting.group_size) for i in range(len(decisions))], decisions)
    batch = [Sample(r.prompt_ids, r.completion_ids, r.logprobs, a) for r, a in zip(replies, advantage)]
    learner = Learner("main", policy, torch.optim.SGD(model.parameters(), lr=0.0), adapters=bool(config.lora_r))
    norm = update(learner, batch, config)["grad_norm"]
    trained = [p for p in model.parameters() if p.requires_grad]  # every weight, or with LoRA the adapters
    ours = torch.cat([p.grad.flatten() for p in trained]) * max(1.0, norm)  # undo the clip
    args = GRPOConfig(output_dir=str(out / "gradient-check" / "trl"), per_device_train_batch_size=len(batch),
                      num_generations=setting.group_size, max_completion_length=setting.max_new_tokens,
                      beta=0.0, epsilon=0.2, epsilon_high=0.2, loss_type="dapo", use_cpu=True, bf16=False,
                      gradient_checkpointing=False, report_to="none", save_strategy="no", max_steps=1)
    dataset = Dataset.from_list([{"prompt": list(decision_messages(d, ENV_KWARGS))} for d in decisions])
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **_: [0.0] * len(completions), args=args,
                          train_dataset=dataset, processing_class=tokenizer)
    prompt_ids, prompt_mask = left_pad([b.prompt_ids for b in batch], tokenizer.pad_token_id, "cpu")
    completion_ids, completion_mask = right_pad([b.completion_ids for b in batch], tokenizer.pad_token_id, "cpu")
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
              "completion_mask": completion_mask, "advantages": torch.tensor(advantage, dtype=torch.float32),
              "num_items_in_batch": completion_mask.sum().float()}
    model.zero_grad(set_to_none=True)
    model.train()
    try:
        if not hasattr(trainer, "current_gradient_accumulation_steps"):  # set by Trainer's loop, which is not running
            trainer.current_gradient_accumulation_steps = 1
        trainer.compute_loss(model, inputs).backward()
    except (AttributeError, KeyError, TypeError) as exc:
        print(f"loss gradient check skipped: TRL's compute_loss changed ({type(exc).__name__}: {exc})")
        return None
    finally:
        model.eval()
    theirs = torch.cat([p.grad.flatten() for p in trained])
    return float((ours - theirs).norm() / theirs.norm())


def final_reward(model, tokenizer, setting: Setting, seed: int) -> dict[str, float]:
    """Score a trained model: ``eval_samples`` sampled replies per decision, one sampler for both sides."""
    from llm_zoo.policies.transformers import TransformersPolicy

    policy = TransformersPolicy(model, tokenizer, temperature=1.0, max_new_tokens=setting.max_new_tokens,
                                seed=seed, device="cpu")
    rewards, per_decision, valid = [], [], 0
    for d in range(len(DECISIONS)):
        messages = decision_messages(d, ENV_KWARGS)
        replies = policy.act([{"messages": messages}] * setting.eval_samples)
        values = [reward_of(r.text, d) for r in replies]
        valid += sum(v != INVALID_REWARD for v in values)
        rewards += values
        per_decision.append(statistics.fmean(values))
    mean = statistics.fmean(rewards)
    se = statistics.stdev(rewards) / math.sqrt(len(rewards)) if len(rewards) > 1 else 0.0
    return {"mean": mean, "se": se, "valid": valid / len(rewards), "per_decision": per_decision}


# ---------------------------------------------------------------------------------------------
# REPORT
# ---------------------------------------------------------------------------------------------


def _last_quarter(rewards: Sequence[float]) -> float:
    return statistics.fmean(rewards[-max(1, len(rewards) // 4):])


def _smooth(values: Sequence[float], window: int) -> list[float]:
    return [statistics.fmean(values[max(0, i - window + 1):i + 1]) for i in range(len(values))]


def plot(runs: Sequence[Mapping[str, Any]], per_step: int, best: float, path: Path) -> None:
    """Draw each side's training reward against completions: each seed faint, their mean smoothed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = len(runs[0]["rows"]["llm_zoo"]["rewards"])
    window = max(1, steps // 15)
    xs = [(i + 1) * per_step for i in range(steps)]
    for name, colour in (("llm_zoo", "tab:blue"), ("trl", "tab:orange")):
        curves = [run["rows"][name]["rewards"] for run in runs]
        for curve in curves:
            ax.plot(xs, _smooth(curve, window), color=colour, alpha=0.25, linewidth=0.8)
        mean = [statistics.fmean(x) for x in zip(*curves)]
        ax.plot(xs, _smooth(mean, window), color=colour,
                label=f"{name} (mean of {len(curves)} seed(s), {window}-step average)")
    ax.axhline(best, color="grey", linestyle="--", linewidth=0.8, label=f"best reachable ({best:+.3f})")
    ax.axhline(INVALID_REWARD, color="grey", linestyle=":", linewidth=0.8, label="unreadable reply")
    ax.set_xlabel("completions")
    ax.set_ylabel("mean reward of the step")
    ax.set_title(f"Kuhn's first decisions vs a fixed opponent ({runs[0]['rows']['llm_zoo']['model']})", fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_seed(setting: Setting, seed: int, out: Path, trl_first: bool) -> dict[str, Any]:
    """Run both trainers on one seed (same initial weights, same prompts); return their figures and checks."""
    config = our_config(setting, seed, out / f"llm_zoo-seed{seed}")
    seeds = planned_seeds(config)
    sides: dict[str, dict[str, Any]] = {}
    for name in (("trl", "llm_zoo") if trl_first else ("llm_zoo", "trl")):
        print(f"seed {seed}: training {name} ...", file=sys.stderr, flush=True)
        load = os.getloadavg()[0]
        sides[name] = run_ours(config) if name == "llm_zoo" else run_trl(config, setting, seeds, out / f"seed{seed}")
        sides[name]["load"] = load
    ours, theirs = sides["llm_zoo"], sides["trl"]
    planned = Counter(s for step in seeds for s in step)
    decisions = [[decision_of(random.Random(s)) for s in step] for step in seeds]
    same_prompts = (Counter(ours["served"]) == Counter({s: n * setting.group_size for s, n in planned.items()})
                    and [sorted(x) for x in theirs["seen"]]
                    == [sorted(d for d in step for _ in range(setting.group_size)) for step in decisions])
    # every prompt TRL fed its model is our tokenization of one of the decisions it saw, and each of those is fed
    same_prompt_ids = None if theirs["prompt_ids"] is None else (
        set(theirs["prompt_ids"]) == {tuple(ours["prompt_ids"][d]) for step in decisions for d in step})
    per_step = setting.completions_per_step
    rows = {}
    for name in ("llm_zoo", "trl"):
        side = sides[name]
        final = final_reward(side["model"], side["tokenizer"], setting, seed=seed + 1)
        rows[name] = {"steps": len(side["step_s"]), "step_s": sum(side["step_s"]), "wall_s": side["wall_s"],
                      "sampling_s": sum(side["sample_s"]), "rewards": side["rewards"], "final_reward": final["mean"],
                      "final_reward_se": final["se"], "final_valid": final["valid"], "load": side["load"],
                      "completions_per_s": per_step * len(side["step_s"]) / sum(side["step_s"]),
                      "model": setting.label, "adapters": side["adapters"],
                      "skipped_fraction": side.get("skipped", 0.0) / (per_step * len(side["step_s"]))}
    return {"seed": seed, "rows": rows, "same_prompts": same_prompts, "same_prompt_ids": same_prompt_ids}


def _paired(diffs: Sequence[float]) -> tuple[float, float]:
    """Return the mean of paired differences and its standard error (0 for one)."""
    return statistics.fmean(diffs), (statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    started = time.perf_counter()  # the JSON line's wall-clock "seconds"
    parser = harness.parser(__doc__, quick="the smallest setting: a few steps of a smaller model, one seed")
    parser.add_argument("--steps", type=harness.count, default=None, help="training steps of each trainer")
    parser.add_argument("--group-size", type=int, default=None, help="completions per prompt (GRPO's group), >= 2")
    parser.add_argument("--prompts-per-step", type=harness.count, default=None, help="groups per step")
    parser.add_argument("--lr", type=harness.positive, default=None, help="learning rate of both")
    parser.add_argument("--max-new-tokens", type=harness.count, default=None, help="longest reply, in tokens")
    parser.add_argument("--eval-samples", type=harness.count, default=None,
                        help="sampled replies per prompt when scoring each final model")
    parser.add_argument("--model", default="tiny", metavar="NAME|DIR",
                        help="tiny (default: a tiny llama built from a config, the same weights on both sides), or "
                        "a pretrained model both sides load: a catalogue name (smollm2-135m) or a model directory; "
                        "it starts from the 'pretrained' setting")
    parser.add_argument("--lora-r", type=int, default=None, metavar="N",
                        help="LoRA rank on the pretrained model, both sides (0: full fine-tuning; default 8)")
    parser.add_argument("--lora-alpha", type=harness.positive, default=None, help="LoRA's alpha, both sides (16)")
    parser.add_argument("--lora-dropout", type=float, default=None, help="LoRA's dropout, both sides (0)")
    parser.add_argument("--lora-target-modules", default=None, metavar="A,B",
                        help="the modules LoRA wraps, both sides (default: every linear layer of the blocks)")
    harness.add_seeds(parser, default=None, help="seeds (model init, prompts, samplers), each run by both trainers, "
                      "the first to run alternating; default 3, 1 with --quick")
    harness.add_out(parser, "folder for the runs, the plot and figures.json (default: a temp folder)")
    args = parser.parse_args(argv)
    pretrained = args.model != "tiny"
    if pretrained:
        base = SETTINGS["pretrained_quick" if args.quick else "pretrained"]
    else:
        base = SETTINGS["quick" if args.quick else "full"]
    targets = None if args.lora_target_modules is None else tuple(
        t.strip() for t in args.lora_target_modules.split(",") if t.strip())
    overrides = {k: v for k, v in (("steps", args.steps), ("group_size", args.group_size),
                                   ("prompts_per_step", args.prompts_per_step), ("lr", args.lr),
                                   ("max_new_tokens", args.max_new_tokens), ("eval_samples", args.eval_samples),
                                   ("lora_r", args.lora_r), ("lora_alpha", args.lora_alpha),
                                   ("lora_dropout", args.lora_dropout), ("lora_target_modules", targets))
                 if v is not None}
    if args.group_size is not None and args.group_size < 2:
        parser.error(f"--group-size must be >= 2 (GRPO's advantages compare completions of one prompt); "
                     f"got {args.group_size}")
    lora_flags = [f for f, v in (("--lora-r", args.lora_r), ("--lora-alpha", args.lora_alpha),
                                 ("--lora-dropout", args.lora_dropout), ("--lora-target-modules", targets))
                  if v is not None]
    if not pretrained and lora_flags:
        parser.error(f"{', '.join(lora_flags)} adapt a pretrained model, but --model is tiny (built from a config, "
                     f"trained whole); name one with --model smollm2-135m or --model DIR, or drop the LoRA flags")
    if args.lora_r is not None and args.lora_r < 0:
        parser.error(f"--lora-r must be >= 0 (0: full fine-tuning); got {args.lora_r}")
    if args.lora_dropout is not None and not 0.0 <= args.lora_dropout < 1.0:
        parser.error(f"--lora-dropout must be in [0, 1); got {args.lora_dropout}")
    if pretrained:
        from llm_zoo.catalogue import model_source

        try:  # a catalogue name is converted here, once, not inside the timed runs
            model_source(args.model, field="--model")
        except (FileNotFoundError, ValueError) as exc:
            parser.error(str(exc))
    setting = Setting(**{**base.__dict__, **overrides, "model": args.model})
    n_seeds = args.seeds if args.seeds is not None else (1 if args.quick else 3)

    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")  # the libraries' deprecation notes: not this comparison's
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="trainer_vs_trl_"))
    out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    per_step = setting.completions_per_step

    print(f"Kuhn first decisions vs a fixed opponent: {setting.steps} steps x {setting.prompts_per_step} prompts x "
          f"{setting.group_size} completions ({per_step} per step), max_new_tokens {setting.max_new_tokens}, "
          f"lr {setting.lr:g}, {setting.label}"
          f"{'' if setting.pretrained else f' (init std {setting.init_std:g})'}, {n_seeds} seed(s), 1 torch thread, load average {load:.2f}")
    print("\nmove values against the opponent (exact):")
    for d, (seat, card, history) in enumerate(DECISIONS):
        shown = ",".join(m.value for m in history) or "-"
        moves = "  ".join(f"{m.value} {v:+.3f}" for m, v in VALUES[d].items())
        print(f"  player_{seat} {CARDS[card]} after {shown:5s}  {moves}")
    best = best_mean_reward()
    print(f"  best reachable mean reward {best:+.4f}; an unreadable reply {INVALID_REWARD:+g}")

    runs = [run_seed(setting, seed, out, trl_first=bool(seed % 2)) for seed in range(n_seeds)]
    gradient_diff = loss_gradient_check(setting, 0, out)

    print(f"\n{'seed':>4s} {'trainer':8s} {'steps':>5s} {'s/step':>8s} {'compl/s':>8s} {'wall s':>7s} "
          f"{'compl/s e2e':>11s} {'reward, last 1/4':>16s} {'final reward':>16s} {'valid':>6s} {'load':>5s}  model")
    for run in runs:
        for name, r in run["rows"].items():
            print(f"{run['seed']:>4d} {name:8s} {r['steps']:>5d} {r['step_s'] / r['steps']:>8.4f} "
                  f"{r['completions_per_s']:>8.1f} {r['wall_s']:>7.1f} {per_step * r['steps'] / r['wall_s']:>11.1f} "
                  f"{_last_quarter(r['rewards']):>+16.4f} {r['final_reward']:>+9.4f} ± {r['final_reward_se']:.4f} "
                  f"{r['final_valid']:>6.3f} {r['load']:>5.2f}  {r['model']}")
    total = {}
    for name in ("llm_zoo", "trl"):
        rs = [run["rows"][name] for run in runs]
        steps = sum(r["steps"] for r in rs)
        total[name] = {"steps": steps, "s_per_step": sum(r["step_s"] for r in rs) / steps,
                       "completions_per_s": per_step * steps / sum(r["step_s"] for r in rs),
                       "completions_per_s_end_to_end": per_step * steps / sum(r["wall_s"] for r in rs),
                       "sampling_s_per_step": sum(r["sampling_s"] for r in rs) / steps,
                       "reward_last_quarter": statistics.fmean(_last_quarter(r["rewards"]) for r in rs),
                       "final_reward": statistics.fmean(r["final_reward"] for r in rs)}
    print(f"{'all':>4s} " + "\n     ".join(
        f"{name:8s} {t['steps']:>5d} {t['s_per_step']:>8.4f} {t['completions_per_s']:>8.1f} {'':>7s} "
        f"{t['completions_per_s_end_to_end']:>11.1f} {t['reward_last_quarter']:>+16.4f} {t['final_reward']:>+9.4f}"
        for name, t in total.items()))
    skipped = statistics.fmean(run["rows"]["llm_zoo"]["skipped_fraction"] for run in runs)
    print(f"\nllm_zoo skipped the update of {skipped:.0%} of the completions (their group's rewards all equal: no "
          f"advantage, no gradient; TRL runs them)")
    print("where a step goes (s): " + "; ".join(
        f"{name} {t['sampling_s_per_step']:.4f} {what}, {t['s_per_step'] - t['sampling_s_per_step']:.4f} the rest"
        for (name, t), what in zip(total.items(), ("rollout (sampling, envs, records)", "model.generate"))))
    speedup = total["llm_zoo"]["completions_per_s"] / total["trl"]["completions_per_s"]
    speedup_e2e = total["llm_zoo"]["completions_per_s_end_to_end"] / total["trl"]["completions_per_s_end_to_end"]
    per_seed_speedup = [run["rows"]["llm_zoo"]["completions_per_s"] / run["rows"]["trl"]["completions_per_s"]
                        for run in runs]
    print(f"\ncompletions/s, llm_zoo / TRL: {speedup:.2f}x per step (per seed {min(per_seed_speedup):.2f}x to "
          f"{max(per_seed_speedup):.2f}x), {speedup_e2e:.2f}x end to end (goal {GOAL_SPEEDUP:g}x)")

    # The curve: per seed, the mean over steps of (ours - TRL's) step reward, paired by step (the same
    # prompts); the final policy: the sampled rewards' difference. Over several seeds the spread of the
    # seeds' differences is the standard error; with one, the steps' (curve) or the samples' (final).
    curve = [statistics.fmean(a - b for a, b in zip(run["rows"]["llm_zoo"]["rewards"], run["rows"]["trl"]["rewards"]))
             for run in runs]
    finals = [run["rows"]["llm_zoo"]["final_reward"] - run["rows"]["trl"]["final_reward"] for run in runs]
    curve_diff, curve_se = _paired(curve)
    final_diff, final_se = _paired(finals)
    if len(runs) == 1:
        r = runs[0]["rows"]
        curve_se = _paired([a - b for a, b in zip(r["llm_zoo"]["rewards"], r["trl"]["rewards"])])[1]
        final_se = math.hypot(r["llm_zoo"]["final_reward_se"], r["trl"]["final_reward_se"])
    no_worse = curve_diff >= -2 * curve_se and final_diff >= -2 * final_se
    print(f"reward, llm_zoo - TRL: {curve_diff:+.4f} ± {curve_se:.4f} over the curve (mean of the steps' "
          f"differences), {final_diff:+.4f} ± {final_se:.4f} at the end; no worse (neither below 0 by 2 standard "
          f"errors): {no_worse}")
    same_prompts = all(run["same_prompts"] for run in runs)
    same_prompt_ids = None if any(run["same_prompt_ids"] is None for run in runs) else all(
        run["same_prompt_ids"] for run in runs)
    print(f"same prompts on both sides: {same_prompts}; same prompt token ids: {same_prompt_ids}; one batch's loss "
          f"gradient, relative difference: {gradient_diff if gradient_diff is None else f'{gradient_diff:.1e}'}")
    adapters_only = None
    if setting.lora_r:  # both sides trained the adapters alone, on every seed
        adapters_only = {name: all(run["rows"][name]["adapters"]["adapters_only"] for run in runs)
                         for name in ("llm_zoo", "trl")}
        print("trained adapters only (every trained weight a LoRA matrix, the base unchanged, the adapters moved): "
              + "; ".join(f"{name} {ok}" for name, ok in adapters_only.items()))

    mean_curve = {name: [statistics.fmean(x) for x in zip(*(run["rows"][name]["rewards"] for run in runs))]
                  for name in ("llm_zoo", "trl")}
    print("\nreward curve (mean training reward of the step, mean over seeds, by completions):")
    marks = sorted({min(setting.steps, max(1, round(setting.steps * f / 10))) for f in range(1, 11)})
    print(f"{'completions':>11s} {'llm_zoo':>9s} {'trl':>9s}")
    for step in marks:
        print(f"{step * per_step:>11d} {mean_curve['llm_zoo'][step - 1]:>+9.4f} {mean_curve['trl'][step - 1]:>+9.4f}")
    figure = out / "trainer_vs_trl.png"
    plot(runs, per_step, best, figure)
    print(f"\nplot: {figure}")

    line = {"speedup": round(speedup, 3), "speedup_end_to_end": round(speedup_e2e, 3),
            "speedup_min_seed": round(min(per_seed_speedup), 3),
            "llm_zoo_completions_per_s": round(total["llm_zoo"]["completions_per_s"], 2),
            "trl_completions_per_s": round(total["trl"]["completions_per_s"], 2),
            "llm_zoo_s_per_step": round(total["llm_zoo"]["s_per_step"], 5),
            "trl_s_per_step": round(total["trl"]["s_per_step"], 5),
            "llm_zoo_steps": total["llm_zoo"]["steps"], "trl_steps": total["trl"]["steps"],
            "llm_zoo_reward_last_quarter": round(total["llm_zoo"]["reward_last_quarter"], 4),
            "trl_reward_last_quarter": round(total["trl"]["reward_last_quarter"], 4),
            "llm_zoo_final_reward": round(total["llm_zoo"]["final_reward"], 4),
            "trl_final_reward": round(total["trl"]["final_reward"], 4),
            "reward_diff_curve": round(curve_diff, 4), "reward_diff_curve_se": round(curve_se, 4),
            "reward_diff_final": round(final_diff, 4), "reward_diff_final_se": round(final_se, 4),
            "reward_no_worse": no_worse, "same_prompts": same_prompts, "same_prompt_ids": same_prompt_ids,
            "loss_gradient_rel_diff": gradient_diff, "best_reward": round(best, 4), "seeds": n_seeds,
            "completions_per_step": per_step,
            "steps": setting.steps, "group_size": setting.group_size, "max_new_tokens": setting.max_new_tokens,
            "trl_loss_type": "dapo", "threads": 1, "load_average": round(load, 2),
            "model": setting.model, "model_label": setting.label, "lora_r": setting.lora_r,
            "lora_alpha": setting.lora_alpha if setting.lora_r else None,
            "lora_dropout": setting.lora_dropout if setting.lora_r else None,
            "lora_target_modules": (list(setting.lora_target_modules) or "all-linear") if setting.lora_r else None,
            "adapters_only": adapters_only, "llm_zoo_skipped_fraction": round(skipped, 4)}
    (out / "figures.json").write_text(json.dumps({**line, "runs": runs, "total": total}))
    line["seconds"] = round(time.perf_counter() - started, 2)
    return harness.emit(line)


if __name__ == "__main__":
    main()
