"""Read a language model's Leduc hold'em strategy exactly, and score it with the exact theory.

For each of the 288 information sets the model is shown exactly the observation the env would show
(its own earlier replies written canonically), and the probability of each legal move is read from
the model's log-probs: every completion enumerated with its exact probability and parsed as the env
parses it when that is few enough sequences (the built-in tiny model with one or two new tokens),
else the probability of each canonical reply (``"[raise]"`` then end of turn). Renormalised over
the legal moves, that is the model's tabular strategy; the mass left over (invalid replies, and in
the canonical reading other wordings too) is reported beside it. With a policy that samples legal
replies only (``constrain``), the canonical reading is the strategy it plays. The reading asks the
policy for :class:`~llm_zoo.policy.ScoresTokens` and nothing else of it.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any

from llm_zoo.envs.leduc_poker import env as leduc_env
from llm_zoo.envs.leduc_poker import text, theory
from llm_zoo.envs.leduc_poker.rules import RANKS, SUITS, Move
from llm_zoo.policy import Policy, ScoresTokens, require_scores_tokens

ENUMERATION_LIMIT = 50_000
"""Most sequences scored to enumerate every completion of every info set."""


def _deal_for(info_set: str) -> tuple[list[str], int]:
    """Return a deal (player_0's, player_1's, public card) in which ``info_set`` arises, and the acting seat."""
    cards, moves = info_set.split(":")
    player = theory.player_of(info_set)
    own = cards[0]
    public = cards[1] if len(cards) == 2 else next(r for r in RANKS if r != own)
    other = next(r for r in reversed(RANKS) if [own, public].count(r) < SUITS)
    deal = [own, other] if player == 0 else [other, own]
    return [*deal, public], player


@functools.lru_cache(maxsize=8)
def _observations(env_kwargs_json: str) -> tuple[dict[str, Any], ...]:
    env_kwargs = json.loads(env_kwargs_json)
    out = []
    env = leduc_env.raw_env(**env_kwargs)
    for info_set in theory.INFO_SETS:
        deal, player = _deal_for(info_set)
        env.reset(seed=0, options={"deal": [deal] + [("J", "Q", "K")] * (env.num_hands - 1)})
        rounds = [[m for m in r.split(",") if m] for r in info_set.split(":")[1].split("/")]
        for move in (m for r in rounds for m in r):
            env.step(text.reply_for(Move(move)))
        obs = env.observe(env.agent_selection)
        assert env.agent_selection == f"player_{player}" and obs["info_set"] == info_set, (info_set, obs["info_set"])
        out.append(obs)
    return tuple(out)


def info_set_observations(env_kwargs: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], ...]:
    """Return the observation the acting player is shown at each info set, in ``theory.INFO_SETS`` order.

    Each arises in the first hand of a match of the env built with ``env_kwargs``, the info set's
    moves played canonically; cached per ``env_kwargs`` (the trainer reads them at every evaluation).
    """
    return _observations(json.dumps(dict(env_kwargs or {}), sort_keys=True))


def exact_strategy(policy: ScoresTokens, env_kwargs: Mapping[str, Any] | None = None
                   ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Return (the model's strategy renormalised over legal moves, the mass off the legal moves per info set).

    ``policy`` scores tokens (:class:`~llm_zoo.policy.ScoresTokens`, as
    :class:`~llm_zoo.policies.TransformersPolicy` does). Enumerates every completion when that takes
    at most :data:`ENUMERATION_LIMIT` sequences and the policy is not constrained, else reads the
    canonical replies.

    Raises:
        TypeError: ``policy`` does not score tokens (Leduc has no sampled reading).
    """
    require_scores_tokens(policy, reader="leduc_poker_v0's exact evaluation",
                          otherwise="measure it in played episodes (llm-zoo crossplay): leduc_poker_v0 has no "
                          "sampled reading")
    observations = info_set_observations(env_kwargs)
    vocab = policy.vocab_size
    if (not policy.constrain and policy.max_new_tokens <= 2
            and len(theory.INFO_SETS) * vocab ** (policy.max_new_tokens - 1) <= ENUMERATION_LIMIT):
        return _enumerated_strategy(policy, observations)
    return _canonical_strategy(policy, observations)


def _renormalise(raw: Mapping[str, Mapping[str, float]]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    table, other = {}, {}
    for info_set, row in raw.items():
        mass = math.fsum(row.values())
        other[info_set] = min(1.0, max(0.0, 1.0 - mass))
        table[info_set] = {m: p / mass for m, p in row.items()} if mass > 0 else {m: 1 / len(row) for m in row}
    return table, other


def _enumerated_strategy(policy: ScoresTokens, observations: tuple[dict[str, Any], ...]
                         ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    eos = set(policy.eos_token_ids)
    prompts = policy.encode_prompts(list(observations))
    first = policy.next_token_logprobs(prompts)  # [288, vocab]
    vocab = first.shape[1]
    done: list[tuple[int, list[int], float]] = []  # (info set index, token ids, probability)
    open_: list[tuple[int, list[int], float]] = []
    probs = first.exp().tolist()
    for i in range(len(prompts)):
        for t in range(vocab):
            item = (i, [t], probs[i][t])
            (done if t in eos or policy.max_new_tokens == 1 else open_).append(item)
    if open_:
        second = policy.next_token_logprobs([prompts[i] + ids for i, ids, _ in open_])
        for (i, ids, p), row in zip(open_, second.exp().tolist()):
            done.extend((i, ids + [t], p * q) for t, q in enumerate(row))
    raw = {i: dict.fromkeys(theory.legal_moves(i), 0.0) for i in theory.INFO_SETS}
    texts = policy.decode_replies([ids for _, ids, _ in done])
    legal = [tuple(Move(m) for m in theory.legal_moves(i)) for i in theory.INFO_SETS]
    for (i, _, p), reply in zip(done, texts):
        move = text.parse_move(reply, legal[i])
        if move is not None:
            raw[theory.INFO_SETS[i]][move.value] += p
    return _renormalise(raw)


def _canonical_strategy(policy: ScoresTokens, observations: tuple[dict[str, Any], ...]
                        ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    encoded = policy.encode_prompts(list(observations))
    replies = {m: policy.encode_reply(text.reply_for(m)) for m in Move}
    prompts, completions, index = [], [], []
    for info_set, prompt in zip(theory.INFO_SETS, encoded):
        for move in theory.legal_moves(info_set):
            ids = list(replies[Move(move)])
            if len(ids) < policy.max_new_tokens:
                ids.append(policy.eos_token_ids[0])
            prompts.append(prompt)
            completions.append(ids[: policy.max_new_tokens])
            index.append((info_set, move))
    raw: dict[str, dict[str, float]] = {}
    for (info_set, move), lps in zip(index, policy.logprobs_of(prompts, completions)):
        raw.setdefault(info_set, {})[move] = math.exp(sum(lps))
    return _renormalise(raw)


def score_strategy(table: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Return the exact exploitability and the exact payoff against uniform random (both seats averaged)."""
    uniform = theory.uniform_policy()
    versus = (theory.game_value(table, uniform) - theory.game_value(uniform, table)) / 2
    return {"exploitability": theory.exploitability(table), "payoff_vs_uniform": versus}


def evaluate_policies(policies: Mapping[str, Policy], *, method: str = "exact",
                      env_kwargs: Mapping[str, Any] | None = None, **_: Any) -> dict[str, Any]:
    """Evaluate the strategy formed by ``policies["player_0"]`` (seat 0's info sets) and ``policies["player_1"]``
    (seat 1's): the exact exploitability of what the models play, read from their log-probs.

    The headline evaluation of ``leduc_poker_v0``'s spec: exact, so it plays no episodes (it takes and
    ignores the spec contract's ``play``). Only ``method="exact"`` exists here: a model that reasons
    before its move has no exact reading on Leduc yet.
    """
    if method != "exact":
        raise ValueError(f"leduc_poker_v0 evaluates a model exactly from its log-probs only: method must be 'exact'; "
                         f"got {method!r:.40} (llm-zoo eval --method exact)")
    reads: dict[int, tuple[dict, dict]] = {}
    for policy in policies.values():
        if id(policy) not in reads:
            reads[id(policy)] = exact_strategy(policy, env_kwargs)
    table, other = {}, {}
    for info_set in theory.INFO_SETS:
        t, o = reads[id(policies[f"player_{theory.player_of(info_set)}"])]
        table[info_set], other[info_set] = t[info_set], o[info_set]
    return {"method": "exact", **score_strategy(table),
            "other_mass_mean": sum(other.values()) / len(other), "strategy": table}

