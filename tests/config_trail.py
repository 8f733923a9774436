"""The config trail of one ``llm-zoo train kuhn_poker_v0`` step, before and after issue 14, and its figures.

Not a test (pytest collects only ``test_*.py``); ``python tests/config_trail.py`` prints the figures
that docs/architecture.md quotes. The trails are written down by reading the code (the "before" one
at commit a093de3): starting in the CLI, each entry is the module where the next value of the
trainer's config (a field, a per-env default, or an env fact the trainer's settings depend on) is
defined or read, in execution order through config building, set-up, one rollout, the update, the
evaluation and the checkpoint. A hop is a change of module; a return to a folder is a hop into it
from outside it after the trail first entered it.
"""

from __future__ import annotations

BEFORE = [
 ("cli", "_train: --config, --set"),
 ("trainers/grpo", "make_config: dataclass defaults"),
 ("llm_zoo/__init__", "ENVS: is the env known, where is its module"),
 ("kuhn_poker_v0", "TRAIN_DEFAULTS (getattr)"),
 ("trainers/grpo", "_coerce, __post_init__ choices"),
 ("llm_zoo/__init__", "ENVS again (__post_init__)"),
 ("trainers/grpo", "train: device, threads, run_dir"),
 ("llm_zoo/__init__", "ENVS (importlib) and make_env(env_kwargs)"),
 ("envs/kuhn_poker/env", "env_kwargs: rules_in_prompt, max_retries"),
 ("kuhn_poker_v0", "LEARNING_ROLES (getattr)"),
 ("trainers/grpo", "policies, learn"),
 ("kuhn_poker_v0", "SCRIPTED (getattr)"),
 ("trainers/grpo", "make_learner"),
 ("llm_zoo/__init__", "ENVS (build_tokenizer_and_model)"),
 ("kuhn_poker_v0", "corpus (getattr)"),
 ("envs/kuhn_poker/text", "corpus()"),
 ("models", "model_hidden_size, model_layers, model_init_std, model_zero_head"),
 ("policies/transformers", "temperature, top_p, max_new_tokens, constrain_to_legal"),
 ("trainers/grpo", "lr, weight_decay, adam_beta1, beta (reference), average_ema"),
 ("policies/transformers", "frozen_copy: the average's policy"),
 ("trainers/grpo", "snapshots"),
 ("kuhn_poker_v0", "evaluate_policies (getattr)"),
 ("trainers/grpo", "eval_every, the loop"),
 ("trainers/logging", "tensorboard"),
 ("trainers/rollout", "collect: episodes_per_step, group_size, rollout_batch_size, env_kwargs"),
 ("llm_zoo/__init__", "make_env(env_kwargs)"),
 ("envs/kuhn_poker/env", "env_kwargs"),
 ("policies/transformers", "act: max_new_tokens, constrain"),
 ("policies/constraints", "legal paths"),
 ("trainers/rollout", "episodes back"),
 ("trainers/grpo", "baseline_key; algorithm (if/elif)"),
 ("trainers/advantages", "rae_decay, grpo_scale"),
 ("trainers/grpo", "samples"),
 ("policies/transformers", "legal_paths (constrain_to_legal)"),
 ("policies/constraints", "allowed_per_position"),
 ("trainers/grpo", "update: micro_batch_size, updates_per_step, aggregation (if/elif), kl_estimator"),
 ("policies/transformers", "completion_logprobs: temperature"),
 ("trainers/grpo", "epsilons, beta, entropy_coef, max_grad_norm, reference_ema, average_ema, pool_*"),
 ("kuhn_poker_v0", "evaluate_policies"),
 ("envs/kuhn_poker/evaluate", "reads the policy's temperature, constrain, max_new_tokens"),
 ("policies/transformers", "_left_pad, _position_ids, logprobs_of"),
 ("trainers/grpo", "checkpoint_every, keep_checkpoints, sample_every (save_checkpoint in grpo)"),
 ("trainers/logging", "log"),
]
AFTER = [
 ("cli", "_train: --config, --set"),
 ("trainers/grpo", "make_config: dataclass defaults"),
 ("trainers/presets", "the kuhn preset"),
 ("trainers/grpo", "_coerce, __post_init__ choices (the tables' names)"),
 ("spec", "registered(): is the env known"),
 ("trainers/grpo", "train: device, threads, run_dir (resume: trainers/checkpoint)"),
 ("spec", "env_spec: learning_roles, scripted, corpus, evaluate as data; make_env(env_kwargs)"),
 ("envs/kuhn_poker/env", "env_kwargs: rules_in_prompt, max_retries"),
 ("trainers/grpo", "policies, learn, make_learner"),
 ("envs/kuhn_poker/text", "spec.corpus()"),
 ("models", "model_hidden_size, model_layers, model_init_std, model_zero_head"),
 ("policies/transformers", "temperature, top_p, max_new_tokens, constrain_to_legal"),
 ("trainers/grpo", "lr, beta (reference), average_ema"),
 ("trainers/selfplay", "frozen_copy"),
 ("policies/transformers", "the average's policy"),
 ("trainers/evaluation", "headline_evaluator(spec)"),
 ("trainers/grpo", "eval_every, the loop"),
 ("trainers/logging", "tensorboard"),
 ("trainers/selfplay", "active_learners: schedule, rotate_every"),
 ("trainers/rollout", "collect: episodes_per_step, group_size, rollout_batch_size, env_kwargs"),
 ("spec", "make_env(env_kwargs)"),
 ("envs/kuhn_poker/env", "env_kwargs"),
 ("policies/transformers", "act: max_new_tokens, constrain"),
 ("policies/constraints", "legal paths"),
 ("trainers/rollout", "episodes back"),
 ("trainers/grpo", "baseline_key"),
 ("trainers/advantages", "ESTIMATORS[algorithm]"),
 ("trainers/grpo", "samples"),
 ("policies/transformers", "legal_paths (constrain_to_legal)"),
 ("policies/constraints", "allowed_per_position"),
 ("trainers/grpo", "update: micro_batch_size, AGGREGATIONS[aggregation], kl_estimator"),
 ("scoring", "completion_logprobs: temperature"),
 ("trainers/grpo", "epsilons, beta, entropy_coef, reference_ema, average_ema"),
 ("trainers/selfplay", "pool_every, pool_size"),
 ("trainers/evaluation", "the headline, with play = collect"),
 ("envs/kuhn_poker/evaluate", "reads the policy's temperature, constrain, max_new_tokens"),
 ("policies/transformers", "next_token_logprobs, logprobs_of"),
 ("trainers/evaluation", "figures back"),
 ("trainers/grpo", "checkpoint_every, keep_checkpoints, sample_every"),
 ("trainers/checkpoint", "save_checkpoint"),
 ("trainers/logging", "log"),
]
def figures(trail: list[tuple[str, str]]) -> dict[str, int]:
    """Return the trail's entries, hops, distinct modules, returns to trainers/ and policies/."""
    mods = [m for m, _ in trail]
    hops = sum(1 for a, b in zip(mods, mods[1:]) if a != b)

    def returns(room: str) -> int:
        def inside(m: str) -> bool:
            return m.startswith(room + "/")

        entries = sum(1 for a, b in zip(mods, mods[1:]) if inside(b) and not inside(a))
        return entries - (1 if any(map(inside, mods)) and not inside(mods[0]) else 0)  # the first entry is not a return
    return {"entries": len(trail), "hops": hops, "modules": len(set(mods)), "returns_to_trainers": returns("trainers"),
            "returns_to_policies": returns("policies"), "modules_outside_trainers": len({m for m in mods if not m.startswith("trainers/")})}
if __name__ == "__main__":
    print("before", figures(BEFORE))
    print("after ", figures(AFTER))
