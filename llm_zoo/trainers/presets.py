"""Per-env training defaults: what ``llm-zoo train ENV`` changes in :class:`~llm_zoo.trainers.grpo.TrainConfig`.

These are training configuration, not env state, so they live with the trainer, keyed by the
env's versioned name. :func:`~llm_zoo.trainers.grpo.make_config` applies, in order: the
dataclass defaults, the env's preset here, a config file, then ``--set`` overrides. An env
registered from outside the package (:func:`llm_zoo.register`) gets no preset unless it adds one
with :func:`add`; it trains with the dataclass defaults and whatever the command line sets.

Each preset is for one kind of model. :data:`PRESETS` are for the tiny model built from nothing
(``model=tiny``, the default): a word or BPE tokenizer drawn from the env's text (``model_tokenizer``), one-token moves,
a zero output layer, copy heads. :data:`PRETRAINED_PRESETS` are for a model with weights of its own
(a catalogue name such as ``smollm2-135m``, a model directory or a hub name): its own tokenizer and
chat template, replies of several tokens. ``make_config`` picks the table by ``model``, and
:func:`check_model_settings` refuses, naming the field, a setting of :data:`TINY_ONLY` on a
pretrained model, wherever it came from (a copied preset, a config file, ``--set``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from llm_zoo.catalogue import is_pretrained
from llm_zoo.envs.agentic_judge.env import LEARNING_TASKS
from llm_zoo.envs.user_sim.env import LEARNING_SCENARIOS, WARM_START_SCENARIOS
from llm_zoo.spec import env_reference

__all__ = ["DEFAULT_MODELS", "PRESETS", "PRETRAINED_PRESETS", "TINY_ONLY", "add", "check_model_settings", "default_model",
           "preset", "value_and_default"]

KUHN_POKER_V0: dict[str, Any] = {
    # The main job: self-play of the tiny model, one model per seat, on a 2-core CPU in minutes. Each value was
    # measured one change at a time; docs/kuhn_selfplay.md ("Why the main job's preset holds each value") has the runs.
    "steps": 2000,  # about 9 min a run, two runs side by side on a 2-core AMD EPYC (the seeds' ends: entropy_coef)
    "episodes_per_step": 1024,  # 4x the episodes for about 1.3x a step's time: a quarter of the gradient's variance
    "eval_every": 50,
    "checkpoint_every": 250,
    "micro_batch_size": 2048,  # one update over the whole batch: each distinct prompt runs once (64: 3x slower)
    "rollout_batch_size": 1024,  # every episode of the step side by side: one policy call per seat and turn
    "max_new_tokens": 1,  # one-token replies: the tiny model's vocabulary has each move as a single token
    "env_kwargs": {"rules_in_prompt": False, "max_retries": 0},  # learned from play, 3x faster; invalid forfeits
    "constrain_to_legal": True,  # action masking: unmasked, a model from scratch collapses onto one token
    "beta": 0.2,  # the magnet's weight with SGD: 0.05 first at steps 150, 150, 100 (at 0.3: 100, 150, 225)
    "magnet.beta_final": 1.0,  # rising over the last 40%: the learner ends within 0.003 of the reported policy
    "kl_estimator": "exact",
    "entropy_coef": 0.02,  # the legal moves' entropy: seeds 0-2 end at 0.0023, 0.0020, 0.0012 (0.01: 0.0017, 0.0023,
    #   0.0047; none: 0.0037, 0.0032, 0.0076); a mixed move kept mixed while the average closes on it
    "magnet.ema": 0.95,  # a magnet of horizon 20 steps early: plain self-play cycles at 0.15-0.4
    "magnet.ema_final": 0.995,  # ...growing linearly to 200 steps at the end (a constant 0.995: 0.048 at 1500)
    "average.ema": 0.998,  # the reported policy is an average of the weights, as CFR reports its average strategy
    "average.power": 2.0,  # weighted step ** 2: lagged 0.004 at step 400 (step ** 1: 0.011; the EMA far more)
    "magnet.average_from": 0.6,  # the last 40%: the magnet is that average, so the learner settles near it
    "policies": {"player_0": "seat_0", "player_1": "seat_1"},  # one network for both seats stalls at 0.056-0.060
    "baseline_key": "agent",  # one RAE baseline per seat: one over both seats of a zero-sum game stays at 0
    "model_hidden_size": 128,  # wider decouples the 12 information sets better (0.08-0.11 against 0.1-0.2)
    "model_init_std": 0.125,
    "model_zero_head": True,  # every seed starts from the uniform policy (a random head stuck seed 1 at 0.35)
    "optimizer": "sgd",  # steps shrink with the gradient near the equilibrium, where AdamW's keep circling it
    "lr": 0.1,  # 0.3 circles (0.12 at step 250)
    "warmup_steps": 25,  # 0.05 first at steps 125, 150, 100 on seeds 0-2, against 200, 175, 100 with 50
    "lr_schedule": "linear",
    "threads": 1,  # the tiny model's kernels are too small to gain from more threads, and lose to contention
    "unmask.steps": 200,  # after the last step, play without the mask: least legal mass 0.0001 -> 0.9994
}
"""The main job (``llm-zoo train kuhn_poker_v0``); each choice measured in docs/kuhn_selfplay.md."""

LEDUC_POKER_V0: dict[str, Any] = {
    # Kuhn's main job carried over to Leduc hold'em (288 info sets against Kuhn's 12), with what Leduc's own runs
    # measured (docs/kuhn_selfplay.md, section 15); benchmarks/leduc.py measures it beside CFR+ and MaskablePPO.
    **KUHN_POKER_V0,
    "steps": 220,  # about 10 minutes on one core of a 2-core AMD EPYC
    "episodes_per_step": 2048,  # 256 a step: 1.50 after 90 steps; 1024 x 200: 0.41; 4096 x 130: 0.49; 2048 x 220: 0.36
    "rollout_batch_size": 2048,  # every hand of the step side by side: each distinct prompt runs once, and Leduc's
    "micro_batch_size": 4096,  # ...saturate (a step of 1024 hands took 1.7x one of 256 on the idle machine)
    "eval_every": 20,
    "checkpoint_every": 0,
    "turn_baseline.mode": "prompt",  # one baseline per information set: the card's share of a return's spread
    #   (a hand's chips are about 10x Kuhn's) leaves the gradient; 1024 a step: learner 0.41 at step 175 against 0.53
    "optimizer": "adamw",  # Kuhn's SGD at 0.1 with its magnet schedule: 0.68 after 250 steps; SGD at 0.05: 1.28 at 100
    "lr": 1e-3,  # 2e-3: no better at the same steps (0.57 against 0.55 at step 100)
    "beta": 1.0,
    "magnet.ema": 0.98,  # about 50 steps; 0.99: 0.61 at step 225 against 0.43
    "magnet.ema_final": 0.0,  # a constant EMA until the magnet becomes the average
    "magnet.average_from": 0.5,  # the last half: the magnet is the average, and its weight rises to 3, so the learner
    "magnet.beta_final": 3.0,  # ...stays near the reported policy (without: the learner drifts from 0.40 back to 0.97)
    "average.ema": 0.98,  # switches the average on; average.power sets its weights
    "average.power": 2.0,  # the iterates weighted by step ** 2, as Kuhn's: the EMA of 50 steps lagged the learner
    "entropy_coef": 0.0,  # Kuhn's bonus not carried over: 0.03, 0.04, 0.05, 0.1, 0.2 ended at 0.34, 0.45, 0.30, 0.51, 0.46
    "warmup_steps": 0,  # Kuhn's warm-up is not measured on Leduc
    "unmask.steps": 0,  # nor its fit without the mask (nor that fit's cost on 288 info sets)
}
"""``llm-zoo train leduc_poker_v0``: Kuhn's main job on Leduc, every hand of a 2048-hand step side by side, one
baseline per information set, the magnet the average over the second half; within 15 minutes on 2 cores."""

AGENTIC_JUDGE_V0: dict[str, Any] = {
    # The main job: the tiny solver, warm-started by SFT on stored solutions, then RL on the frozen rule judge's score;
    # the measurements behind each value are in docs/training.md.
    "env_kwargs": {"tasks": list(LEARNING_TASKS), "prompt": "compact", "solver_reward": "judge", "max_tool_calls": 4,
                   "max_retries": 0},
    "policies": {"judge": "scripted:rule_judge"},  # frozen: it uses its tools but never the hidden tests
    "init": "sft",
    # correct and wrong solutions mixed, so the warm start samples both; the rate decays to 0 over the fit
    "sft": {"teachers": {"solver": ["reference", "alternative", "wrong", "wrong"], "judge": "rule_judge"},
            "options": [{"task": t} for t in LEARNING_TASKS], "episodes": 48, "epochs": 20, "batch_size": 4,
            "lr": 3e-3, "warmup_steps": 4, "lr_schedule": "linear", "lr_min_ratio": 0.0, "val_fraction": 0.0},
    "model_hidden_size": 128,
    "model_tokenizer": "bpe",  # a stored solution must come back byte for byte
    "max_new_tokens": 352,  # the longest stored solution's reply is 340 tokens of the env's BPE tokenizer
    "temperature": 0.7,  # sampling (and the loss) at 0.7: the tiny model's tail tokens corrupt a memorised solution
    "steps": 32,  # each episode runs about 5 sandboxed programs: a step takes about 3-6 s on a 2-core CPU
    "episodes_per_step": 8,
    "group_size": 4,  # four episodes per env seed share the task: GRPO compares four solutions of one task
    "rollout_batch_size": 8,
    "micro_batch_size": 8,
    "algorithm": "grpo",
    "lr": 1e-4,  # moves the warm start's mass among its solutions; faster rates drift into unstored code
    "eval_every": 8,
    "checkpoint_every": 0,
    "sample_every": 0,
    "threads": 1,
}
"""The main job of agentic_judge (``llm-zoo train agentic_judge_v0``): warm start, then RL of the solver on the
frozen rule judge's score; ``benchmarks/learning.py`` runs it 3 seeds x 3 rewards (judge, visible, hidden tests)."""

PROPOSER_SOLVER_V0: dict[str, Any] = {
    # The main job: the proposer, warm-started by SFT on tasks of every difficulty, then RL on learnability 4p(1-p)
    # against a frozen panel of scripted solvers; the measurements behind each value are in docs/training.md.
    "learn": ["proposer"],
    "policies": {"solver_0": "scripted:solver_weak", "solver_1": "scripted:solver", "solver_2": "scripted:solver",
                 "solver_3": "scripted:solver_strong"},  # proposer_solver_v0.PANEL, seat by seat
    # program modes only (tasks of 49-185 tokens), no retries, an invalid task at -0.5 (-1 and 0 both set traps)
    "env_kwargs": {"modes": ["deduction", "abduction"], "topics": "training", "max_retries": 0,
                   "invalid_penalty": 0.5},
    "init": "sft",
    # 256 tasks, 10 epochs (4 epochs of 192: no valid task at all)
    "sft": {"teachers": {"proposer": "proposer_mixed"}, "episodes": 256, "epochs": 10, "batch_size": 16,
            "lr": 3e-3, "warmup_steps": 4, "val_fraction": 0.1},
    "model_hidden_size": 128,
    "model_tokenizer": "bpe",  # a task's program must come back byte for byte; digits stay one token each
    "max_new_tokens": 192,  # the longest scripted task of these modes is 185 tokens (difficulty 9)
    "temperature": 0.8,  # keeps tasks valid: 6% invalid on held-out topics at 0.8, 44-78% at 1.0
    "algorithm": "hgrpo",  # each proposal minus the mean of the four proposals on its seed topic
    "steps": 30,  # 30 steps of 32 episodes (8 topics x 4 tasks)
    "episodes_per_step": 32,
    "group_size": 4,
    "rollout_batch_size": 32,
    "micro_batch_size": 32,
    "lr": 3e-4,  # at 1e-3 AdamW drifted off the warm start in a few steps; 3e-4 rose steadily
    "eval_every": 15,
    "checkpoint_every": 0,
    "sample_every": 0,
    "threads": 1,
}
"""The main job of proposer_solver (``llm-zoo train proposer_solver_v0``): warm start, then RL of the proposer
against the frozen scripted solvers; ``benchmarks/learning.py`` runs it 3 seeds x 3 advantage estimators."""

USER_SIM_V0: dict[str, Any] = {
    # The main job: a tiny model warm-started by SFT on the scripted assistant's traces, then RL for the assistant
    # against the frozen scripted user, about 5 minutes on a 2-core CPU (docs/training.md).
    "policies": {"user": "scripted:scripted"},  # frozen: the scripted simulator plays each persona faithfully
    "env_kwargs": {
        # tools by name and argument names instead of JSON schemas: 818 characters instead of 7354
        "prompt": "compact",
        # the twelve single-task templates of the shortest conversations (7-9 assistant turns)
        "scenarios": list(LEARNING_SCENARIOS),
        # the scripted assistant needs at most 10 messages and 5 tool calls on them; a looping model stops early
        "max_turns": 12,
        "max_tool_calls": 8,
    },
    "max_new_tokens": 96,  # the scripted assistant's longest reply here is 85 tokens of the env's tokenizer
    "model_hidden_size": 128,
    "model_tokenizer": "bpe_words",  # tool calls come back byte for byte; an id reads the same where it is copied
    "init": "sft",  # warm start: SFT on the held-in templates' traces, then RL from it
    "sft": {"options": [{"scenario": s} for s in WARM_START_SCENARIOS], "episodes": 64, "epochs": 3,
            "batch_size": 4, "lr": 3e-3, "warmup_steps": 5, "max_tokens_per_micro_batch": 4096},
    "steps": 4,
    "episodes_per_step": 8,
    "group_size": 4,  # four episodes per env seed (the same template and world): GRPO compares them
    "rollout_batch_size": 8,
    "micro_batch_size": 16,
    "lr": 3e-4,
    "eval_every": 2,
    "checkpoint_every": 0,
    "sample_every": 0,
    "threads": 1,  # the tiny model's kernels are too small to gain from more threads
}
"""The main job of user_sim (``llm-zoo train user_sim_v0``): warm start, then RL with the user frozen."""

PRESETS: dict[str, dict[str, Any]] = {
    "kuhn_poker_v0": KUHN_POKER_V0,
    "leduc_poker_v0": LEDUC_POKER_V0,
    "agentic_judge_v0": AGENTIC_JUDGE_V0,
    "proposer_solver_v0": PROPOSER_SOLVER_V0,
    "user_sim_v0": USER_SIM_V0,
}
"""Env name -> the config fields its training runs of the tiny model start from (over the dataclass defaults)."""

# ---- presets for a pretrained model ---------------------------------------------------------
# What changes for a model with weights of its own: the env's full prompt (the rules, the tools as
# the env declares them), the model's own tokenizer (each Kuhn and Leduc move is 3 tokens of SmolLM2's,
# so replies get room for a few words), LoRA at a small learning rate, small batches (a 135M model's
# forward and backward over a 1,200-token prompt take about 3 and 13 s on 2 cores), passes bounded by
# the prompts' measured lengths, and nothing of TINY_ONLY. Which values learn in what time is
# benchmarks/learning.py's to measure: these are starting points, safe rather than tuned.

SFT_ONE_A_STEP: dict[str, Any] = {"batch_size": 1, "lr": 1e-3, "lr_schedule": "linear", "lr_min_ratio": 0.0}
"""The pretrained warm starts' fit (user_sim's, the judge's, the proposer's): one conversation a step at lr 1e-3,
decayed linearly to 0 (docs/warm_start.md)."""

_PRETRAINED_COMMON: dict[str, Any] = {
    "lora_r": 16,  # with checkpointing a game's estimated peak is 2.0-2.6 GiB (full fine-tuning's state: 3.2)
    "lora_alpha": 32.0,
    "gradient_checkpointing": True,  # a backward keeps one block's activations and a hidden state per block
    "lr": 1e-4,  # LoRA's rate is about ten times full fine-tuning's (Schulman et al., "LoRA Without Regret", 2025)
    "optimizer": "adamw",
    "lr_schedule": "constant",
    "warmup_steps": 0,
    "temperature": 1.0,
    "eval_every": 0,
    "checkpoint_every": 0,
    "sample_every": 0,
    "threads": 0,  # torch's default: a 135M model's kernels gain from every core, unlike the tiny model's
}

_POKER_PRETRAINED: dict[str, Any] = {
    **_PRETRAINED_COMMON,
    "env_kwargs": {"max_retries": 0},  # the rules in the prompt: the model reads the game, not learns it from play
    "max_new_tokens": 8,  # a move and end of turn (SmolLM2: [check] is 3 tokens), with room for a word around it
    "constrain_to_legal": True,  # zero-shot a pretrained model writes no move in 90-96% of its replies
    "baseline_key": "agent",  # one model for both seats (one copy of the weights), a baseline per seat
    "max_prompt_tokens": 384,  # SmolLM2's prompt at a hand's first decision is 154-187 tokens with the rules
    "max_forward_tokens": 1024,  # 2 rows of 392 tokens a pass: 2.3 GiB estimated in all (trainers/memory.py)
    # short rows: activations fit, and without checkpointing the update scores the rules' prefix once for all
    # rows (checkpointing drops the KV cache the shared prefix needs): 76 rows of a step, 8.8 s against 203 s
    "gradient_checkpointing": False,
    "steps": 20,
    "episodes_per_step": 32,
    "rollout_batch_size": 32,
    "micro_batch_size": 32,
}

KUHN_POKER_V0_PRETRAINED: dict[str, Any] = {
    **_POKER_PRETRAINED,
    # 1024 hands a step side by side: the sampler decodes each (prompt, tokens so far) once (TransformersPolicy,
    # "Shared decoding") and the update scores each distinct row once, so a step of SmolLM2-135M on 2 cores took about
    # 18 s (rollout 5-6 s, update 12-13 s) against 7.8 s for 32 hands; the gradient is then the strategy's, not a
    # handful of hands'
    "episodes_per_step": 1024,
    "rollout_batch_size": 1024,
    "micro_batch_size": 2048,
    # from a warm start at 0.0407 (seed 0, a model per seat, 20 steps; docs/training.md): AdamW at 1e-4 drifted away
    # (0.181 after 5 steps, 0.246 after 10), SGD at 0.3 without a magnet held it (0.042, 0.047, 0.039, 0.043), with
    # this magnet it fell and rose again (0.035, 0.023, 0.022, 0.051); at 0.1 it fell every time read (0.039, 0.033,
    # 0.030, 0.024). SGD's steps shrink with the gradient near the equilibrium, where AdamW's do not
    "optimizer": "sgd",
    "lr": 0.1,
    "beta": 0.2,  # the KL to the magnet (with LoRA, adapters of its own that follow the learner's: grpo.adapter_copy)
    "kl_estimator": "exact",
    "magnet.ema": 0.9,  # a horizon of 10 steps
}
"""``llm-zoo train kuhn_poker_v0 --set model=NAME``: self-play of one pretrained model, masked to legal moves, 1024
hands a step, SGD with a magnet."""

LEDUC_POKER_V0_PRETRAINED: dict[str, Any] = {
    **_POKER_PRETRAINED,  # Kuhn's before its batch, optimiser and magnet, which are not measured on Leduc
    "max_prompt_tokens": 512,  # 205-238 tokens of SmolLM2's at the first decision; two rounds and a public card add more
    "steps": 10,
}
"""``llm-zoo train leduc_poker_v0 --set model=NAME``: Kuhn's pretrained preset on Leduc hold'em."""

AGENTIC_JUDGE_V0_PRETRAINED: dict[str, Any] = {
    **_PRETRAINED_COMMON,
    # the env's full prompt: the tools declared as JSON schemas, as a chat model expects them
    "env_kwargs": {"tasks": list(LEARNING_TASKS), "solver_reward": "judge", "max_tool_calls": 4, "max_retries": 0},
    "policies": {"judge": "scripted:rule_judge"},
    "max_new_tokens": 384,  # a solution written through write_file, then run_tests
    "max_prompt_tokens": 3072,  # the solver's first prompt is 1025 tokens of SmolLM2's; each tool call adds
    "max_forward_tokens": 4096,
    "memory_limit_gb": 7.0,  # one sequence of 3456 tokens holds about 3.5 GiB in a LoRA backward: 6.3 GiB in all
    "steps": 8,
    "episodes_per_step": 8,
    "group_size": 4,
    "rollout_batch_size": 8,
    "micro_batch_size": 4,
    "algorithm": "grpo",
}
"""``llm-zoo train agentic_judge_v0 --set model=NAME``: RL of a pretrained solver on the frozen rule judge's score."""

PROPOSER_SOLVER_V0_PRETRAINED: dict[str, Any] = {
    **_PRETRAINED_COMMON,
    "learn": ["proposer"],
    "policies": dict(PROPOSER_SOLVER_V0["policies"]),
    "env_kwargs": {"modes": ["deduction", "abduction"], "topics": "training", "max_retries": 0,
                   "invalid_penalty": 0.5},
    "max_new_tokens": 256,  # the longest scripted task is 185 tokens of the env's BPE; a pretrained one is alike
    "max_prompt_tokens": 512,  # the proposer's prompt is 380 tokens of SmolLM2's
    "max_forward_tokens": 1024,  # one row of 768 tokens a pass: 2.7 GiB estimated (Kuhn's comment)
    # adapters in the top 15 of SmolLM2's 30 blocks (as user_sim's), without checkpointing: the blocks below build no
    # graph and none is recomputed. An update of a step's 8 tasks (2 prompts, 120-220 tokens each) took 36-40 s at a
    # peak of 2.1 GB, against 64-69 s with adapters in every block under checkpointing (one thread, the same load)
    "lora_layers": 15,
    "gradient_checkpointing": False,
    "algorithm": "hgrpo",
    # 32 steps: 16 ended at 0.54 on average over 3 seeds, under the best fixed difficulty's 0.57 (docs/training.md)
    "steps": 32,
    "episodes_per_step": 8,
    "group_size": 4,
    "rollout_batch_size": 8,
    "micro_batch_size": 4,
}
"""``llm-zoo train proposer_solver_v0 --set model=NAME``: RL of a pretrained proposer against the scripted solvers."""

USER_SIM_V0_PRETRAINED: dict[str, Any] = {
    # The main job of user_sim (its default model is this one: presets.DEFAULT_MODELS): SmolLM2-135M-Instruct
    # warm-started by SFT on the held-in templates' traces, then RL for the assistant against the frozen scripted
    # user, within 30 minutes and 4 GiB on 2 CPU cores.
    **_PRETRAINED_COMMON,
    "policies": {"user": "scripted:scripted"},
    # the tools by name and argument names (818 characters; as JSON schemas, the first prompt alone is 2026 tokens
    # of SmolLM2's): the first prompt is 306 tokens and a whole scripted conversation about 1000 (at most 1178;
    # 1308 with the warm start's noting assistant, whose longest reply is 72 tokens)
    "env_kwargs": {"prompt": "compact", "scenarios": list(LEARNING_SCENARIOS), "max_turns": 12, "max_tool_calls": 8},
    "max_new_tokens": 96,  # the scripted assistant's longest reply is 60 tokens of SmolLM2's: room for its own
    "max_prompt_tokens": 1536,  # a conversation longer than the scripted one's 1178 tokens ends as failed
    # the update runs each episode as its last turn's row, its earlier turns read off it (scoring.plan_nesting):
    # one conversation of up to 1632 tokens a pass
    "max_forward_tokens": 1632,
    # sampling keeps no activations: the rollout's 8 conversations prefill and decode side by side (under the
    # update's budget they would run one at a time, each decode step for one row)
    "max_rollout_tokens": 13056,
    "micro_batch_size": 128,  # every turn of a step's episodes; the token budget splits the passes
    "memory_limit_gb": 4.0,
    # sampling (and the loss) at 0.7, as the tiny solver's: at 1.0 the warm start's replies break a tool call's JSON
    # or an id it copies (`{"order_id": orderId}`) in about one episode of two
    "temperature": 0.7,
    # adapters in the top 15 of SmolLM2's 30 blocks, for the warm start and RL alike: the blocks below build no graph
    "lora_layers": 15,
    "init": "sft",  # warm start on the held-in templates, then RL from its adapters
    # 192 traces, one a step, the rate decaying to 0, taught by the assistant that restates the request before each
    # tool call (scripted_notes): success 20 and 18 of 24 evaluation episodes (seeds 0 and 1; 23 of the 24 held-in
    # ones), against 11 and 14 in two fits of 64 traces on seed 0, whose ids and emails came back miscopied; 32 traces
    # x 2 epochs in batches of 4 with every block adapted never acted on an action template (docs/warm_start.md)
    "sft": {"options": [{"scenario": s} for s in WARM_START_SCENARIOS], "episodes": 192, "epochs": 1,
            "teachers": {"user": "scripted", "assistant": "scripted_notes"},
            **SFT_ONE_A_STEP,
            # one trace a step (at most 1308 tokens): without checkpointing the activations fit
            "gradient_checkpointing": False,
            "val_fraction": 0.0, "max_tokens_per_micro_batch": 1300},
    "steps": 4,
    "episodes_per_step": 8,
    # four episodes per env seed (the same template and world), which GRPO compares: an episode is credited only
    # against others of its own template. Five of the twelve templates succeed when nothing changes, so a reward
    # less a baseline shared by every template (RAE's, which starts at 0 and moves 5% a step) pays for doing
    # nothing: 10 steps of it at lr 3e-4 from a warm start of success 0.625 (3.6 tool calls an episode) ended at the
    # do-nothing floor, 0.417 with 1.5 tool calls, every template that needs a change failed (docs/training.md).
    # A group whose rewards are all equal trains nothing; in 4 steps GRPO skipped 3 of the main job's updates
    "algorithm": "grpo",
    "group_size": 4,
    "rollout_batch_size": 8,
}
"""The main job of user_sim (``llm-zoo train user_sim_v0``): warm start, then RL of a pretrained assistant against the
frozen scripted user."""

PRETRAINED_PRESETS: dict[str, dict[str, Any]] = {
    "kuhn_poker_v0": KUHN_POKER_V0_PRETRAINED,
    "leduc_poker_v0": LEDUC_POKER_V0_PRETRAINED,
    "agentic_judge_v0": AGENTIC_JUDGE_V0_PRETRAINED,
    "proposer_solver_v0": PROPOSER_SOLVER_V0_PRETRAINED,
    "user_sim_v0": USER_SIM_V0_PRETRAINED,
}
"""Env name -> the config fields its training runs of a pretrained model start from."""


DEFAULT_MODELS: dict[str, str] = {
    # a model built from nothing cannot read an email out of a customer's sentence (docs/warm_start.md): no episode
    # of the tiny model's beats the do-nothing floor, so the env's main job is the pretrained model's
    "user_sim_v0": "smollm2-135m",
}
"""Env name -> the model its runs use when none is named (``tiny`` for an env not listed); ``model=tiny`` still
picks the tiny model and its preset."""


def default_model(env: str) -> str:
    """Return the model ``env``'s runs use when the config names none (:data:`DEFAULT_MODELS`, else ``tiny``)."""
    return DEFAULT_MODELS.get(env, "tiny")


def _changed(value: Any, default: Any) -> bool:
    return value != default


TINY_ONLY: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    # field: (refused when (value, dataclass default) says so, why it belongs to the tiny model)
    "model_hidden_size": (_changed, "the width of the tiny model built from nothing; a pretrained model has its own"),
    "model_layers": (_changed, "the depth of the tiny model built from nothing; a pretrained model has its own"),
    "model_tokenizer": (_changed, "how the tiny model's tokenizer is drawn from the env's text; a pretrained model "
                        "has its own"),
    "model_init_std": (_changed, "the tiny model's random initialisation; a pretrained model's weights are loaded"),
    "model_zero_head": (lambda v, _: bool(v), "the uniform start (a zero output layer), which would erase what the "
                        "pretrained model's output layer knows"),
    "copy_heads.enabled": (lambda v, _: bool(v), "the copy heads written over the tiny model's first two layers"),
    "max_new_tokens": (lambda v, _: int(v) <= 1, "one-token replies, for the tiny model's tokenizer that has each "
                       "move as one token; a pretrained tokenizer spells a move in several, so no legal reply fits "
                       "and an evaluation would read nothing of the model"),
    "unmask.steps": (lambda v, _: int(v) > 0, "the fit without the decoding mask after the last step, measured on "
                     "the tiny model's one-token moves only"),
}
"""Settings tuned for the tiny model built from nothing, which :func:`check_model_settings` refuses on a pretrained one."""


def preset(env: str, model: str = "tiny") -> dict[str, Any]:
    """Return a copy of the training defaults of ``env`` for ``model``'s kind ({} for an env without a preset).

    ``tiny`` gets :data:`PRESETS`; any other model (a catalogue name, a directory, a hub name)
    :data:`PRETRAINED_PRESETS`.
    """
    table = PRETRAINED_PRESETS if is_pretrained(model) else PRESETS
    return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in table.get(env, {}).items()}


def check_model_settings(config: Any) -> None:
    """Refuse a setting of :data:`TINY_ONLY` on a pretrained model, naming the field and its default.

    ``config`` is a dataclass with the model fields (``TrainConfig``); nothing is checked for ``model=tiny``.

    Raises:
        ValueError: a field of :data:`TINY_ONLY` holds a tiny-model value while ``config.model`` is pretrained.
    """
    if not is_pretrained(config.model):
        return
    for name, (refused, why) in TINY_ONLY.items():
        value, default = value_and_default(config, name)
        if not refused(value, default):
            continue
        fix = f"leave it at its default ({default!r})" if not refused(default, default) else "raise it"
        raise ValueError(f"config.{name}={value!r} is a setting for the tiny model: {why}. With a "
                         f"pretrained model (config.model={config.model!r}) {fix}; `llm-zoo train {env_reference(config.env)} --set "
                         f"model={config.model}` starts from the env's preset for pretrained models")


def value_and_default(config: Any, name: str) -> tuple[Any, Any]:
    """Return a field's value in ``config`` and its dataclass default; ``name`` may be a plug-in's ``SECTION.FIELD``."""
    section, dot, sub = name.partition(".")
    holder = getattr(config, section) if dot else config
    key = sub if dot else name
    default = next(f.default for f in dataclasses.fields(holder) if f.name == key)
    return getattr(holder, key), default


def add(env: str, values: Mapping[str, Any], *, pretrained: bool = False) -> None:
    """Set the training defaults of ``env`` (e.g. for an env registered from outside the package), for the tiny
    model or, with ``pretrained``, for a pretrained one."""
    (PRETRAINED_PRESETS if pretrained else PRESETS)[env] = dict(values)
