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

__all__ = ["PRESETS", "PRETRAINED_PRESETS", "TINY_ONLY", "add", "check_model_settings", "preset"]

KUHN_POKER_V0: dict[str, Any] = {
    # The main job (`llm-zoo train kuhn_poker_v0`): self-play of the tiny model with RAE, one model
    # per seat, on a 2-core CPU in minutes. Each choice below was measured (seed 0, same budget, one
    # change at a time); docs/kuhn_selfplay.md has the runs.
    # 2000 steps (the schedules below span the run): seeds 0, 1, 2 end at 0.0037, 0.0032, 0.0076 (last iterates
    # 0.0074, 0.0068, 0.0038) and first reach 0.05 after 200, 150, 100 steps (50.3 s of training on average); a run
    # took 12 min at 0.35 s a step on a 2-core AMD EPYC (docs/kuhn_selfplay.md, section 13). 2500 steps ended lower
    # (0.0021, 0.0051, 0.0073) but took 16.8-17.5 min at 0.35-0.42 s a step, past the 15 minutes of issue 20.
    # With AdamW, 1200 steps were at 0.052-0.053 at step 1000, where 2500 were at 0.008-0.010 (section 10).
    "steps": 2000,
    # 1024 hands a step: 4x the episodes for about 1.3x a step's time (the rollout and the update run each distinct
    # prompt once, and Kuhn has 12), so a quarter of the gradient's variance. With 256 on that machine seed 2 stalled
    # at 0.10-0.14 for 1300 steps (0.049 at the end), and with the body at a tenth of the rate (body_lr_scale 0.1)
    # seed 1 ended at 0.037 (docs/kuhn_selfplay.md, section 10); with 128 the last iterate's exploitability swung
    # 0.05-0.10 from one eval to the next
    "episodes_per_step": 1024,
    "eval_every": 50,
    "checkpoint_every": 250,
    # one update over the whole batch: each distinct prompt then runs once (micro-batches of 64: 3x slower steps)
    "micro_batch_size": 2048,
    # every episode of the step side by side: a policy call per seat and turn for the whole batch, not per 64 envs
    # (with 256 episodes: rollout 0.16 -> 0.06 s a step, step 0.25 -> 0.14 s; the episodes are other draws)
    "rollout_batch_size": 1024,
    # one-token replies: the tiny model's vocabulary has each move as a single token
    "max_new_tokens": 1,
    # The rules stay out of the prompt: the tiny model learns the game from play, 3x faster per step.
    # No retries: an invalid reply forfeits at once, so it costs what it should.
    "env_kwargs": {"rules_in_prompt": False, "max_retries": 0},
    # Sample only legal replies (action masking, as MaskablePPO does): a model learning from scratch
    # otherwise spends its budget on the format and collapses onto one token for every context.
    "constrain_to_legal": True,
    # A magnet: an exact KL to an EMA of the learner's own weights. Plain self-play policy gradients
    # cycle around Kuhn's mixed equilibrium (exploitability 0.15-0.4 with an entropy bonus alone).
    # With the plain gradient steps below, 0.2: 0.05 first at steps 150, 150 and 100 on seeds 0, 1 and 2, against
    # 100, 150 and 225 at 0.3 (docs/kuhn_selfplay.md, section 12); with AdamW it was 1.0.
    "beta": 0.2,
    # ...rising to 1 over the last 40% of the run (from magnet_average_from, below): at 0.2 to the end the learner,
    # which leads its magnet by about its advantages over beta, ended 0.0077 and 0.0166 from the reported policy on
    # seeds 1 and 2 (0.0119 / 0.0042, 0.0223 / 0.0057); at 1 it had ended within 0.003 (docs/kuhn_selfplay.md, 12)
    "beta_final": 1.0,
    "kl_estimator": "exact",
    # With beta 1 the learner leads its magnet by about (advantage / beta) in logits, so the policy moves
    # as fast as the magnet follows: a magnet of horizon 20 steps early, growing linearly to 200 at the
    # end (issue 20). A constant 0.995 (200 steps) from the start: 0.048 after 1500 steps, 0.05 first
    # after about 1400; this schedule with lr 3e-3 and the warm-up below: 0.015 (seed 0; seeds 1 and 2 in
    # docs/kuhn_selfplay.md, section 7).
    "reference_ema": 0.95,
    "reference_ema_final": 0.995,
    # The trained policy is an average of the weights (Polyak averaging), as CFR reports its average
    # strategy: weights in proportion to step ** 2 (average_power), a window that grows with the run
    # and forgets the uniform start. The EMA of 0.998 (about 500 steps) lags far behind early (old main
    # job, step 500: 0.155 against the learner's 0.096); step ** 1 lagged by 0.011 at step 400, ** 2 by 0.004.
    "average_ema": 0.998,
    "average_power": 2.0,
    # For the last 40% of the run the magnet is that average: the learner, which leads its magnet by about its
    # advantages over beta, settles near the reported policy instead of circling it (seed 2, 256 episodes a step:
    # last iterate 0.0092 against the average's 0.0059, where its own EMA as the magnet ended at 0.0125 against 0.0079)
    "magnet_average_from": 0.6,
    # One model per seat, each with its own initialisation and optimiser, both starting from the
    # uniform policy (zero output layers) and playing each other. One network playing both seats
    # ties together information sets that need different answers (K first vs K after a check, ...)
    # and stalls at 0.056-0.060 on this budget.
    "policies": {"player_0": "seat_0", "player_1": "seat_1"},
    # One RAE baseline per seat (with one model per seat, per model). Both seats have the role
    # "player", and one baseline over both seats of a zero-sum game stays at 0 (RAE would be
    # REINFORCE without a baseline); per seat it learns the first player's disadvantage.
    "baseline_key": "agent",
    # a wider model than the default decouples the 12 information sets better (0.08-0.11 vs 0.1-0.2)
    "model_hidden_size": 128,
    "model_init_std": 0.125,
    # ...but with that init a random output layer can make a context nearly deterministic from the
    # start (seed 1: call a bet with every card at 0.99), where the gradient vanishes and the run
    # sticks at 0.35; a zero output layer starts every seed from the uniform policy
    "model_zero_head": True,
    # Plain gradient steps (SGD, no momentum), not AdamW: a step shrinks with its gradient, so the policy slows
    # down as the advantages shrink near the equilibrium, where AdamW's steps of about lr on every weight keep
    # the learner circling it. Seed 0 to step 250 (reported policy): 0.050 with SGD at 0.1 and beta 0.5, 0.083 with
    # AdamW at 3e-3 and beta 1; with beta 0.2, 0.05 is first reached at step 100-150 on seeds 0-2, where AdamW
    # reached it at step 600 (docs/kuhn_selfplay.md, section 12). 0.3 circles (0.12 at step 250).
    "optimizer": "sgd",
    "lr": 0.1,
    # ...after a warm-up. With AdamW at full step from the first update, seed 1 lost the difference between Q and K
    # in seat 1's network within 50 steps and stuck at 0.165, and 50 warm-up steps cured it. With SGD (whose first
    # steps are small, the gradient clipped to norm 1) 25 suffice and reach 0.05 sooner: first at steps 125, 150
    # and 100 on seeds 0-2 (evaluated every 25), against 200, 175 and 100 with 50 (docs/kuhn_selfplay.md, section 13)
    "warmup_steps": 25,
    "lr_schedule": "linear",
    # one torch thread: the tiny model's kernels are too small to gain from more, and lose to contention
    "threads": 1,
    # After the last step, the delivered weights learn to reply validly with no decoding mask: 200 full-batch steps
    # fitting the unconstrained model to its own masked strategy at the info sets its turns met (issue 20, item 3).
    # Measured on a trained seed-1 checkpoint: least legal mass 0.0001 -> 0.9994 over the 12 info sets, the masked
    # strategy moved by at most 1e-4, exploitability 0.0344 before and after, 0.0346 with no mask; about 25 s.
    # RL with a validity term in the loss instead spoilt the strategy (docs/kuhn_selfplay.md, section 8).
    "unmask_steps": 200,
}
"""The main job (``llm-zoo train kuhn_poker_v0``); each choice measured in docs/kuhn_selfplay.md."""

LEDUC_POKER_V0: dict[str, Any] = {
    # Kuhn's main job carried over to Leduc hold'em (288 info sets against Kuhn's 12), to show how the
    # trainer's cost grows with the game: one model per seat, RAE with a baseline per seat, the EMA
    # magnet, the EMA average as the reported policy, masking, one-token replies; benchmarks/leduc.py
    # measures it beside CFR+ and MaskablePPO.
    **KUHN_POKER_V0,
    # A Leduc episode is about 4 decisions on prompts of about 100 tokens (Kuhn: 2 on about 50), and a
    # step of 256 episodes took 4-9 s on the shared 2-core machine (load average 6-10): 90 steps keep the
    # run within 15 minutes there.
    "steps": 90,
    "eval_every": 20,
    "checkpoint_every": 0,
    # With 90 steps Kuhn's time constants (500 steps for the average, 200 for the magnet) would leave
    # the reported policy and the magnet at the uniform start (measured: with 0.998 the average was at
    # 2.31 after 40 steps while the last iterate was at 1.60): about 50 steps each instead. The larger
    # step for the short schedule (1e-3 against Kuhn's 3e-4) is not compared on Leduc.
    "average_ema": 0.98,
    "reference_ema": 0.98,
    "lr": 1e-3,
    # Kuhn's magnet schedule, step-weighted average and warm-up (issue 20) are not measured on Leduc: its
    # constant EMAs above and no warm-up, as benchmarks/leduc.py ran them
    "reference_ema_final": 0.0,
    "average_power": 0.0,
    "warmup_steps": 0,
    # Kuhn's fit without the mask is not measured on Leduc's 288 info sets (nor its cost within the 15 minutes)
    "unmask_steps": 0,
    # nor are Kuhn's later changes (issue 20, section 10 of docs/kuhn_selfplay.md): Leduc keeps what it measured
    "episodes_per_step": 256,
    "rollout_batch_size": 64,
    "micro_batch_size": 512,
    "magnet_average_from": 0.0,
    # nor Kuhn's plain gradient steps and weaker magnet (section 12): AdamW and beta 1, as benchmarks/leduc.py ran them
    "optimizer": "adamw",
    "beta": 1.0,
    "beta_final": 0.0,
}
"""``llm-zoo train leduc_poker_v0``: Kuhn's main job on Leduc, sized to finish within 15 minutes on 2 shared cores."""

AGENTIC_JUDGE_V0: dict[str, Any] = {
    # The main job (`llm-zoo train agentic_judge_v0`, issue 17): the tiny solver, warm-started by SFT on the stored
    # solutions of six tasks (correct and wrong ones mixed, so it starts by sampling both), then RL on the frozen
    # rule judge's score (`env_kwargs.solver_reward`: `visible` and `hidden` pay the tests' pass rates instead;
    # benchmarks/learning.py runs all three). A real model: `--set model=DIR init=none max_new_tokens=512`.
    "env_kwargs": {"tasks": list(LEARNING_TASKS), "prompt": "compact", "solver_reward": "judge", "max_tool_calls": 4,
                   "max_retries": 0},
    # the judge is frozen: the rule-based judge, which uses its tools but never the hidden tests
    "policies": {"judge": "scripted:rule_judge"},
    "init": "sft",
    # the traces cycle over the tasks (8 episodes each); the solver draws the reference, the alternative or one of
    # the two wrong solutions, about a quarter each. Measured (seed 0, 12 epochs of 48 episodes, 2 per task): train
    # token accuracy 0.977, and sampled at temperature 1.0 no reply was a stored solution byte for byte, at 0.5 half.
    # The rate decays linearly to 0 over the fit: at a constant 3e-3 the fit ended at train loss 0.064 and 25 of 48
    # solutions sampled at 0.7 were corrupted copies (hidden pass 0.146); decayed, 0.022 and 14 of 48 (0.292; seed 0)
    "sft": {"teachers": {"solver": ["reference", "alternative", "wrong", "wrong"], "judge": "rule_judge"},
            "options": [{"task": t} for t in LEARNING_TASKS], "episodes": 48, "epochs": 20, "batch_size": 4,
            "lr": 3e-3, "warmup_steps": 4, "lr_schedule": "linear", "lr_min_ratio": 0.0, "val_fraction": 0.0},
    "model_hidden_size": 128,
    "model_tokenizer": "bpe",  # a stored solution must come back byte for byte
    # the longest stored solution's reply (write_file + run_tests) is 340 tokens of the env's BPE tokenizer
    "max_new_tokens": 352,
    # sampling (and the loss) at 0.7: the tiny model's tail tokens corrupt a memorised solution (see above)
    "temperature": 0.7,
    # 32 steps of 8 episodes: each episode runs about 5 sandboxed programs (a step takes about 3-6 s on a 2-core CPU)
    "steps": 32,
    # four episodes per env seed share the task: GRPO compares four solutions of one task
    "episodes_per_step": 8,
    "group_size": 4,
    "rollout_batch_size": 8,
    "micro_batch_size": 8,
    "algorithm": "grpo",
    # RL at 1e-4 moves the warm start's mass among its memorised solutions; faster rates drift the copies into
    # unstored code. Seed 0, from the same warm start (0.292 [0.18, 0.43] hidden pass, 48 evaluation episodes):
    # 1e-4 ends at 0.542 [0.40, 0.67]; 3e-4 fell to 0.125 on its own 8-episode evaluations (0.5 at step 8); the
    # earlier 8 steps at 1e-3 ended at 0.0
    "lr": 1e-4,
    "eval_every": 8,
    "checkpoint_every": 0,
    "sample_every": 0,
    "threads": 1,
}
"""The main job of agentic_judge (``llm-zoo train agentic_judge_v0``): warm start, then RL of the solver on the
frozen rule judge's score; ``benchmarks/learning.py`` runs it 3 seeds x 3 rewards (judge, visible, hidden tests)."""

PROPOSER_SOLVER_V0: dict[str, Any] = {
    # The main job (`llm-zoo train proposer_solver_v0`, issue 17): the proposer, warm-started by SFT on
    # the scripted proposer's tasks of every difficulty (1-9, so it starts by sampling easy and hard
    # ones), then RL on learnability 4p(1-p) against a frozen panel of scripted solvers of fixed skill.
    # Training draws from the 30 training topics; the evaluation poses tasks on the 10 held-out ones.
    "learn": ["proposer"],
    "policies": {"solver_0": "scripted:solver_weak", "solver_1": "scripted:solver", "solver_2": "scripted:solver",
                 "solver_3": "scripted:solver_strong"},  # proposer_solver_v0.PANEL, seat by seat
    # Program modes only: their tasks are 49-185 tokens of the env's BPE tokenizer (induction's and
    # integer's run to 480-580 at difficulty 9). No retries: a malformed task ends the episode at once.
    # An invalid task scores -0.5 (the env's default is -1). Measured, 3 seeds x hgrpo/rae/grpo at lr 1e-3
    # from warm starts sampled at temperature 1 (44-78% invalid tasks): with -1, RL first escaped the
    # penalty, 2 of 9 runs ending on tasks every solver gets right (0 > -1, and a group of those has no
    # variance left) and 2 of 9 (rae) on invalid ones. With 0, invalid tasks became the trap instead (the
    # default run and one other collapsed to 100% invalid within 10 steps: all-zero groups, no gradient out).
    "env_kwargs": {"modes": ["deduction", "abduction"], "topics": "training", "max_retries": 0,
                   "invalid_penalty": 0.5},
    "init": "sft",
    # 256 tasks, 10 epochs (4 epochs of 192: no valid task at all)
    "sft": {"teachers": {"proposer": "proposer_mixed"}, "episodes": 256, "epochs": 10, "batch_size": 16,
            "lr": 3e-3, "warmup_steps": 4, "val_fraction": 0.1},
    "model_hidden_size": 128,
    "model_tokenizer": "bpe",  # a task's program must come back byte for byte; digits stay one token each
    # the longest scripted task of these modes is 185 tokens (difficulty 9)
    "max_new_tokens": 192,
    # the tiny model's tail tokens are syntax errors: sampling (and the loss) at 0.8 keeps tasks valid (the
    # warm start's invalid share on held-out topics: 6% at 0.8, seed 0; 44-78% at 1.0, 3 seeds)
    "temperature": 0.8,
    # hierarchical GRPO: each proposal minus the mean of the proposals on its seed topic; four episodes
    # per env seed share the topic and mode, so each group compares four tasks written for one prompt
    "algorithm": "hgrpo",
    # 30 steps of 32 episodes (8 topics x 4 tasks)
    "steps": 30,
    "episodes_per_step": 32,
    "group_size": 4,
    "rollout_batch_size": 32,
    "micro_batch_size": 32,
    # Adam moves every weight by about lr per step whatever the gradient's size: at 1e-3 the runs above
    # drifted off their warm start in a few steps; 3e-4 (seed 0, penalty 0.5) rose steadily instead
    "lr": 3e-4,
    "eval_every": 15,
    "checkpoint_every": 0,
    "sample_every": 0,
    "threads": 1,
}
"""The main job of proposer_solver (``llm-zoo train proposer_solver_v0``): warm start, then RL of the proposer
against the frozen scripted solvers; ``benchmarks/learning.py`` runs it 3 seeds x 3 advantage estimators."""

USER_SIM_V0: dict[str, Any] = {
    # The main job (`llm-zoo train user_sim_v0`): a tiny model warm-started by SFT on the scripted
    # assistant's traces of the six held-in templates, then RL for the assistant against the frozen
    # scripted user on all twelve templates of the subset; sized to about 5 minutes on a 2-core CPU
    # (benchmarks/learning.py runs it 3 seeds x 3 advantage estimators).
    # the user is frozen: the scripted simulator plays each persona faithfully
    "policies": {"user": "scripted:scripted"},
    "env_kwargs": {
        # tools by name and argument names instead of JSON schemas: 818 characters instead of 7354
        "prompt": "compact",
        # the twelve single-task templates of the shortest conversations (7-9 assistant turns)
        "scenarios": list(LEARNING_SCENARIOS),
        # the scripted assistant needs at most 10 messages and 5 tool calls on them; a looping model stops early
        "max_turns": 12,
        "max_tool_calls": 8,
    },
    # the scripted assistant's longest reply on these templates is 85 tokens of the env's word-bounded BPE tokenizer
    # (66 with the plain BPE it had before, whose merges glued a space or a quote onto the next word)
    "max_new_tokens": 96,
    "model_hidden_size": 128,
    # tool calls come back byte for byte; an id has the same tokens where it is read and copied
    "model_tokenizer": "bpe_words",
    # warm start: SFT on the held-in templates' traces (llm_zoo.trainers.sft), then RL from it
    "init": "sft",
    "sft": {"options": [{"scenario": s} for s in WARM_START_SCENARIOS], "episodes": 64, "epochs": 3,
            "batch_size": 4, "lr": 3e-3, "warmup_steps": 5, "max_tokens_per_micro_batch": 4096},
    "steps": 4,
    # four episodes per env seed (the same template and world): GRPO compares them
    "episodes_per_step": 8,
    "group_size": 4,
    "rollout_batch_size": 8,
    "micro_batch_size": 16,
    "lr": 3e-4,
    "eval_every": 2,
    "checkpoint_every": 0,
    "sample_every": 0,
    # one torch thread: the tiny model's kernels are too small to gain from more
    "threads": 1,
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

_PRETRAINED_COMMON: dict[str, Any] = {
    # LoRA adapters of rank 16 on every linear layer of the blocks, and activations recomputed in the backward pass:
    # each preset's estimated peak with SmolLM2-135M is then 2.0-2.6 GiB for the games, within the default
    # memory_limit_gb, and 6.3-7.1 GiB for the agentic envs, whose prompts run to thousands of tokens (their own
    # limits below); full fine-tuning's weights, gradients and AdamW state alone are 3.2 GiB. --set lora_r=0 trains
    # every weight (at about a tenth of the rate below).
    "lora_r": 16,
    "lora_alpha": 32.0,
    "gradient_checkpointing": True,
    # LoRA's rate is about ten times full fine-tuning's (Schulman et al., "LoRA Without Regret", 2025), and small
    # beside the tiny model's 1e-3 to 0.1: the pretrained weights are the asset
    "lr": 1e-4,
    "optimizer": "adamw",
    "lr_schedule": "constant",
    "warmup_steps": 0,
    "temperature": 1.0,
    "eval_every": 0,
    "checkpoint_every": 0,
    "sample_every": 0,
    "threads": 0,  # torch's default: a 135M model's kernels gain from every core, unlike the tiny model's
}

KUHN_POKER_V0_PRETRAINED: dict[str, Any] = {
    **_PRETRAINED_COMMON,
    # the rules in the prompt (the env's default): the model reads the game, it does not learn it from play
    "env_kwargs": {"max_retries": 0},
    # a move and end of turn (SmolLM2: [check] is 3 tokens), with room for a word around it when unmasked
    "max_new_tokens": 8,
    # the legal replies only, each a path of several tokens (llm_zoo.policies.constraints): zero-shot a pretrained
    # model writes no move in 90-96% of its replies (issue 39), and RL needs moves to compare
    "constrain_to_legal": True,
    # one model for both seats, so one copy of the weights in memory
    "baseline_key": "agent",
    # SmolLM2's prompt at a hand's first decision is 154-187 tokens with the rules; a hand adds a few dozen
    "max_prompt_tokens": 384,
    # 2 rows of 392 tokens a pass: under checkpointing a LoRA backward holds about 15 hidden sizes per token and
    # block (measured on SmolLM2-135M, trainers/memory.py's CHECKPOINT_KEPT), 2.3 GiB estimated in all
    "max_forward_tokens": 1024,
    "steps": 20,
    "episodes_per_step": 32,
    "rollout_batch_size": 32,
    "micro_batch_size": 32,
}
"""``llm-zoo train kuhn_poker_v0 --set model=NAME``: self-play of one pretrained model, masked to legal moves."""

LEDUC_POKER_V0_PRETRAINED: dict[str, Any] = {
    **KUHN_POKER_V0_PRETRAINED,
    "max_prompt_tokens": 512,  # 205-238 tokens of SmolLM2's at the first decision; two rounds and a public card add more
    "steps": 10,
}
"""``llm-zoo train leduc_poker_v0 --set model=NAME``: Kuhn's pretrained preset on Leduc hold'em."""

AGENTIC_JUDGE_V0_PRETRAINED: dict[str, Any] = {
    **_PRETRAINED_COMMON,
    # the env's full prompt: the tools declared as JSON schemas, as a chat model expects them
    "env_kwargs": {"tasks": list(LEARNING_TASKS), "solver_reward": "judge", "max_tool_calls": 4, "max_retries": 0},
    "policies": {"judge": "scripted:rule_judge"},
    # a solution written through write_file, then run_tests
    "max_new_tokens": 384,
    # the solver's first prompt is 1025 tokens of SmolLM2's (the tools as JSON schemas); each tool call and result adds
    "max_prompt_tokens": 3072,
    "max_forward_tokens": 4096,
    # one sequence of 3456 tokens alone holds about 3.5 GiB in a LoRA backward under checkpointing (15 hidden sizes
    # per token and block, measured on SmolLM2-135M): 6.3 GiB estimated in all, within this CPU machine's 23 GB
    "memory_limit_gb": 7.0,
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
    # the longest scripted task of these modes is 185 tokens of the env's BPE tokenizer; a pretrained tokenizer
    # writes Python in about as many
    "max_new_tokens": 256,
    "max_prompt_tokens": 512,  # the proposer's prompt is 380 tokens of SmolLM2's
    "max_forward_tokens": 1024,  # one row of 768 tokens a pass: 2.6 GiB estimated (Kuhn's comment)
    "algorithm": "hgrpo",
    "steps": 8,
    "episodes_per_step": 8,
    "group_size": 4,
    "rollout_batch_size": 8,
    "micro_batch_size": 4,
}
"""``llm-zoo train proposer_solver_v0 --set model=NAME``: RL of a pretrained proposer against the scripted solvers."""

USER_SIM_V0_PRETRAINED: dict[str, Any] = {
    **_PRETRAINED_COMMON,
    "policies": {"user": "scripted:scripted"},
    # the tools as JSON schemas (the env's default prompt), not the compact listing the tiny model was given
    "env_kwargs": {"scenarios": list(LEARNING_SCENARIOS), "max_turns": 12, "max_tool_calls": 8},
    # the scripted assistant's longest reply on these templates is 60 tokens of SmolLM2's (24 episodes): room for
    # a model's own wording
    "max_new_tokens": 128,
    # the assistant's first prompt is 2026 tokens of SmolLM2's (the 13 tools as JSON schemas); a conversation of 12
    # turns grows past it, up to the default 4096
    "max_forward_tokens": 4224,
    # one sequence of 4224 tokens alone holds about 4.3 GiB in a LoRA backward under checkpointing (15 hidden sizes
    # per token and block, measured on SmolLM2-135M): 7.1 GiB estimated in all, within this CPU machine's 23 GB
    "memory_limit_gb": 8.0,
    "steps": 4,
    "episodes_per_step": 8,
    "group_size": 4,
    "rollout_batch_size": 8,
    "micro_batch_size": 4,
}
"""``llm-zoo train user_sim_v0 --set model=NAME``: RL of a pretrained assistant against the frozen scripted user."""

PRETRAINED_PRESETS: dict[str, dict[str, Any]] = {
    "kuhn_poker_v0": KUHN_POKER_V0_PRETRAINED,
    "leduc_poker_v0": LEDUC_POKER_V0_PRETRAINED,
    "agentic_judge_v0": AGENTIC_JUDGE_V0_PRETRAINED,
    "proposer_solver_v0": PROPOSER_SOLVER_V0_PRETRAINED,
    "user_sim_v0": USER_SIM_V0_PRETRAINED,
}
"""Env name -> the config fields its training runs of a pretrained model start from."""


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
    "model_copy_heads": (lambda v, _: bool(v), "the copy heads written over the tiny model's first two layers"),
    "max_new_tokens": (lambda v, _: int(v) <= 1, "one-token replies, for the tiny model's tokenizer that has each "
                       "move as one token; a pretrained tokenizer spells a move in several, so no legal reply fits "
                       "and an evaluation would read nothing of the model"),
    "unmask_steps": (lambda v, _: int(v) > 0, "the fit without the decoding mask after the last step, measured on "
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
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    for name, (refused, why) in TINY_ONLY.items():
        if name not in defaults or not refused(getattr(config, name), defaults[name]):
            continue
        fix = f"leave it at its default ({defaults[name]!r})" if not refused(defaults[name], defaults[name]) else \
            "raise it"
        raise ValueError(f"config.{name}={getattr(config, name)!r} is a setting for the tiny model: {why}. With a "
                         f"pretrained model (config.model={config.model!r}) {fix}; `llm-zoo train {env_reference(config.env)} "
                         f"--set model={config.model}` starts from the env's preset for pretrained models")


def add(env: str, values: Mapping[str, Any], *, pretrained: bool = False) -> None:
    """Set the training defaults of ``env`` (e.g. for an env registered from outside the package), for the tiny
    model or, with ``pretrained``, for a pretrained one."""
    (PRETRAINED_PRESETS if pretrained else PRESETS)[env] = dict(values)
