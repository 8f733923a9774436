"""Read a language model's Kuhn poker strategy exactly, and score it with the exact theory.

For each of the 12 information sets, the model is shown exactly the observation the env would show
(its own earlier replies written canonically, e.g. ``"[check]"``), and the probability of each legal
move is read from the model's own log-probs. Where the completions the policy can sample are few
enough to list (a small vocabulary and a token budget of one or two, as with the built-in tiny
model), every completion is enumerated with its exact probability, decoded and parsed as the env
parses it; otherwise the probability of each canonical reply (``"[bet]"`` then end-of-turn) is read.
The probabilities, renormalised over the legal moves, are the model's tabular strategy; the mass
left over (invalid replies, and with the canonical reading other wordings too) is reported beside it.

Beside that masked reading, :func:`unconstrained_figures` reads what a client that cannot mask
decoding gets: each legal move's canonical reply then end of turn under the model's own
distribution, the mass of those replies per info set (``valid_mass``), and the exploitability of
that strategy with every other reply a forfeit (``unconstrained_exploitability``, exact by
:func:`forfeit_exploitability`). :func:`evaluate_policies` reports both for models it can score.

The exact readings ask the policy for :class:`~llm_zoo.policy.ScoresTokens` (its prompt and reply
tokens, its next-token and teacher-forced log-probs) and nothing else of it. For models that reason
before answering, or a policy that cannot score tokens, the exact reading does not apply;
:func:`sampled_strategy` estimates the strategy by sampling and parsing replies through
:meth:`~llm_zoo.policy.Policy.act` alone, and labels it as an estimate.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from llm_zoo.envs.kuhn_poker import env as kuhn_env
from llm_zoo.envs.kuhn_poker import text, theory
from llm_zoo.envs.kuhn_poker.rules import CARDS, Move
from llm_zoo.policy import Policy, ScoresTokens, require_scores_tokens

NASH = theory.nash_policy(1 / 6)


def info_set_observation(info_set: str, **env_kwargs: Any) -> dict[str, Any]:
    """Return the observation the env (built with ``env_kwargs``) shows the acting player at ``info_set``.

    The info set is that of the first hand of a match.
    """
    card, history = info_set.split(":")
    moves = [m for m in history.split(",") if m]
    player = len(moves) % 2
    other = next(c for c in CARDS if c != card)
    deal = (card, other) if player == 0 else (other, card)
    env = kuhn_env.raw_env(**env_kwargs)
    num_hands = getattr(env, "num_hands", 1)
    env.reset(seed=0, options={"deal": [deal] + [("J", "Q")] * (num_hands - 1)})
    for move in moves:
        env.step(text.reply_for(Move(move)))
    obs = env.observe(env.agent_selection)
    assert env.agent_selection == f"player_{player}" and obs["info_set"] == info_set, (info_set, obs["info_set"])
    return obs


ENUMERATION_LIMIT = 50_000  # most sequences scored to enumerate every completion of every info set


def exact_strategy(policy: ScoresTokens, env_kwargs: Mapping[str, Any] | None = None) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Return (the model's strategy renormalised over legal moves, the mass on invalid replies per info set).

    ``policy`` scores tokens (:class:`~llm_zoo.policy.ScoresTokens`, as
    :class:`~llm_zoo.policies.TransformersPolicy` does). Enumerates every completion when that takes
    at most :data:`ENUMERATION_LIMIT` sequences, else reads the canonical replies only.

    Raises:
        TypeError: ``policy`` does not score tokens; read it with ``method="sampled"`` instead.
    """
    require_scores_tokens(policy, reader="kuhn_poker_v0's exact evaluation",
                          otherwise="evaluate with method='sampled' (llm-zoo eval --method sampled), which reads any "
                          "policy by sampling its replies")
    vocab = policy.vocab_size
    if policy.constrain:  # it samples canonical replies only: their renormalised mass
        return _canonical_strategy(policy, env_kwargs or {})
    if policy.max_new_tokens <= 2 and len(theory.INFO_SETS) * vocab ** (policy.max_new_tokens - 1) <= ENUMERATION_LIMIT:
        return _enumerated_strategy(policy, env_kwargs or {})
    return _canonical_strategy(policy, env_kwargs or {})


def _renormalise(raw: Mapping[str, Mapping[str, float]]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    table, other = {}, {}
    for info_set, row in raw.items():
        mass = sum(row.values())
        other[info_set] = min(1.0, max(0.0, 1.0 - mass))
        table[info_set] = ({m: p / mass for m, p in row.items()} if mass > 0
                           else {m: 1 / len(row) for m in row})
    return table, other


def _enumerated_strategy(policy: ScoresTokens, env_kwargs: Mapping[str, Any]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    eos = set(policy.eos_token_ids)
    next_logprobs = policy.next_token_logprobs  # [rows, vocab], tempered, on the CPU

    prompts = [policy.encode_prompts([info_set_observation(i, **env_kwargs)])[0] for i in theory.INFO_SETS]
    first = next_logprobs(prompts)  # [12, vocab]
    vocab = first.shape[1]
    # completions: (info set index, token ids, probability)
    done: list[tuple[int, list[int], float]] = []
    open_: list[tuple[int, list[int], float]] = []
    for i in range(len(prompts)):
        for t in range(vocab):
            item = (i, [t], math.exp(first[i, t].item()))
            (done if t in eos or policy.max_new_tokens == 1 else open_).append(item)
    if open_:
        second = next_logprobs([prompts[i] + ids for i, ids, _ in open_])
        for (i, ids, p), row in zip(open_, second):
            probs = row.exp().tolist()
            done.extend((i, ids + [t], p * q) for t, q in enumerate(probs))
    raw = {info_set: dict.fromkeys(theory.legal_moves(info_set), 0.0) for info_set in theory.INFO_SETS}
    texts = policy.decode_replies([ids for _, ids, _ in done])
    for (i, _, p), reply in zip(done, texts):
        info_set = theory.INFO_SETS[i]
        move = text.parse_move(reply, tuple(Move(m) for m in theory.legal_moves(info_set)))
        if move is not None:
            raw[info_set][move.value] += p
    return _renormalise(raw)


def _canonical_strategy(policy: ScoresTokens, env_kwargs: Mapping[str, Any]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    prompts, completions, index = [], [], []
    for info_set in theory.INFO_SETS:
        prompt = policy.encode_prompts([info_set_observation(info_set, **env_kwargs)])[0]
        for move in theory.legal_moves(info_set):
            ids = policy.encode_reply(text.reply_for(Move(move)))
            if len(ids) < policy.max_new_tokens:
                ids.append(policy.eos_token_ids[0])
            prompts.append(prompt)
            completions.append(ids[: policy.max_new_tokens])
            index.append((info_set, move))
    logprobs = policy.logprobs_of(prompts, completions)
    raw: dict[str, dict[str, float]] = {}
    for (info_set, move), lps in zip(index, logprobs):
        raw.setdefault(info_set, {})[move] = math.exp(sum(lps))
    return _renormalise(raw)


def unconstrained_strategy(policy: ScoresTokens, env_kwargs: Mapping[str, Any] | None = None) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Return (each legal move's unconstrained probability, the mass left over) per info set.

    A move's probability is that of its canonical reply then end of turn (``"[bet]"``, EOS) under
    the model's own distribution with no decoding mask, whatever the policy's ``constrain`` says:
    what a client that cannot mask decoding (``llm-zoo serve`` and :class:`~llm_zoo.policies.OpenAIPolicy`)
    gets. The rows are not renormalised; the mass left over is everything else the model could say.
    """
    eos = policy.eos_token_ids[0]
    prompts, completions, index = [], [], []
    for info_set in theory.INFO_SETS:
        prompt = policy.encode_prompts([info_set_observation(info_set, **(env_kwargs or {}))])[0]
        for move in theory.legal_moves(info_set):
            prompts.append(prompt)
            completions.append(policy.encode_reply(text.reply_for(Move(move))) + [eos])
            index.append((info_set, move))
    moves: dict[str, dict[str, float]] = {}
    for (info_set, move), lps in zip(index, policy.logprobs_of(prompts, completions)):
        moves.setdefault(info_set, {})[move] = math.exp(sum(lps))
    left = {i: min(1.0, max(0.0, 1.0 - sum(row.values()))) for i, row in moves.items()}
    return moves, left


def forfeit_exploitability(moves: Mapping[str, Mapping[str, float]], forfeit: Mapping[str, float],
                           penalty: float = 1.0) -> float:
    """Return the exploitability of a strategy that forfeits with probability ``forfeit[I]`` at info set I.

    ``moves[I]`` holds the legal moves' probabilities (summing to ``1 - forfeit[I]``). A forfeit ends
    the hand with ``-penalty`` to the player who forfeited (the env's rule, ``forfeit_penalty``);
    the best responder never forfeits. Exploitability is, as in :func:`theory.exploitability`, the
    mean of the two players' best-response values; with no forfeits it equals it.
    """
    def row(info_set: str) -> dict[str, float]:
        return {m: float(moves[info_set].get(m, 0.0)) for m in theory.legal_moves(info_set)}

    def value_0(history: tuple[str, ...], cards: tuple[int, int], br: Mapping[str, str], player: int) -> float:
        """Player_0's expected payoff below ``history``; ``player`` plays ``br`` where it has chosen."""
        if history in theory._TERMINAL:
            return theory._payoff_0(history, cards)
        actor = theory._TO_ACT[history]
        info_set = theory._info_set(cards[actor], history)
        if actor == player:
            return value_0((*history, br[info_set]), cards, br, player)
        probs = row(info_set)
        lost = forfeit.get(info_set, 0.0) * (-penalty if actor == 0 else penalty)
        return lost + sum(p * value_0((*history, m), cards, br, player) for m, p in probs.items() if p)

    def reach(history: tuple[str, ...], cards: tuple[int, int], opponent: int) -> float:
        prob = 1.0
        for depth, move in enumerate(history):
            prefix = history[:depth]
            if theory._TO_ACT[prefix] == opponent:
                prob *= row(theory._info_set(cards[opponent], prefix))[move]
        return prob

    total = 0.0
    for player in (0, 1):
        sign = 1.0 if player == 0 else -1.0
        br: dict[str, str] = {}
        own = [i for i in theory.INFO_SETS if theory.player_of(i) == player]
        for info_set in sorted(own, key=lambda i: -len(theory._PARSED[i][1])):  # deepest first
            card, history = theory._PARSED[info_set]
            q = {}
            for move in theory.legal_moves(info_set):
                q[move] = 0.0
                for other in range(len(CARDS)):
                    if other != card:
                        cards = (card, other) if player == 0 else (other, card)
                        chance = reach(history, cards, 1 - player)
                        if chance:
                            q[move] += chance * sign * value_0((*history, move), cards, {**br, info_set: move}, player)
            br[info_set] = max(q, key=q.__getitem__)
        deals = [(a, b) for a in range(len(CARDS)) for b in range(len(CARDS)) if a != b]
        total += sign * sum(value_0((), cards, br, player) for cards in deals) / len(deals)
    return total / 2


def unconstrained_figures(policies: Mapping[str, ScoresTokens], env_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Return the unconstrained strategy's figures: exploitability with every other reply a forfeit,
    and the mass of the legal replies (each then end of turn) per info set, its least and its mean."""
    reads: dict[int, tuple[dict, dict]] = {}
    for policy in policies.values():
        if id(policy) not in reads:
            reads[id(policy)] = unconstrained_strategy(policy, env_kwargs)
    moves, forfeit = {}, {}
    for info_set in theory.INFO_SETS:
        m, f = reads[id(policies[f"player_{theory.player_of(info_set)}"])]
        moves[info_set], forfeit[info_set] = m[info_set], f[info_set]
    penalty = float((env_kwargs or {}).get("forfeit_penalty", 1.0))
    valid = {i: 1.0 - f for i, f in forfeit.items()}
    return {"unconstrained_exploitability": forfeit_exploitability(moves, forfeit, penalty),
            "valid_mass_min": min(valid.values()), "valid_mass_mean": sum(valid.values()) / len(valid),
            "valid_mass": valid}


SAMPLES = 64
"""Replies sampled per info set by the sampled estimate (and what its intervals assume)."""


def sampled_strategy(policy: Policy, samples: int = SAMPLES, env_kwargs: Mapping[str, Any] | None = None) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Estimate the strategy by sampling ``samples`` replies per info set and parsing them (an estimate)."""
    table, other = {}, {}
    for info_set in theory.INFO_SETS:
        obs = info_set_observation(info_set, **(env_kwargs or {}))
        legal = tuple(Move(m) for m in theory.legal_moves(info_set))
        counts = dict.fromkeys((m.value for m in legal), 0)
        invalid = 0
        for reply in policy.act([obs] * samples):
            move = text.parse_move(reply, legal)
            if move is None:
                invalid += 1
            else:
                counts[move.value] += 1
        valid = samples - invalid
        table[info_set] = ({m: c / valid for m, c in counts.items()} if valid
                           else {m.value: 1 / len(legal) for m in legal})
        other[info_set] = invalid / samples
    return table, other


def sampled_intervals(table: Mapping[str, Mapping[str, float]], other: Mapping[str, float], samples: int, *,
                      draws: int = 400, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Return a 95% interval for each figure of :func:`score_strategy` on a sampled strategy.

    A parametric bootstrap: each info set's valid replies are drawn again from the estimated move
    frequencies (``draws`` times, seeded), the strategy is scored each time, and the 2.5th and 97.5th
    percentiles are the interval (``<figure>_ci95``). It covers the sampling of replies only, not
    the model's own uncertainty.
    """
    rng = random.Random(seed)
    scores: dict[str, list[float]] = {}
    for _ in range(draws):
        drawn = {}
        for info_set, probs in table.items():
            valid = round(samples * (1.0 - other[info_set]))
            moves = list(probs)
            if valid == 0:
                drawn[info_set] = dict(probs)
                continue
            picks = rng.choices(moves, weights=[probs[m] for m in moves], k=valid)
            drawn[info_set] = {m: picks.count(m) / valid for m in moves}
        for key, value in score_strategy(drawn).items():
            scores.setdefault(key, []).append(value)
    out = {}
    for key, values in scores.items():
        values.sort()
        out[f"{key}_ci95"] = (values[int(0.025 * (draws - 1))], values[int(0.975 * (draws - 1))])
    return out


def score_strategy(table: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Return exploitability and exact payoffs (averaged over both seats) against Nash and uniform."""
    uniform = theory.uniform_policy()

    def versus(opponent: Mapping[str, Mapping[str, float]]) -> float:
        return (theory.game_value(table, opponent) - theory.game_value(opponent, table)) / 2

    return {
        "exploitability": theory.exploitability(table),
        "payoff_vs_nash": versus(NASH),
        "payoff_vs_uniform": versus(uniform),
    }


def evaluate(policy: Policy, *, method: str = "exact", samples: int = SAMPLES,
             env_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Evaluate a model on Kuhn poker: exploitability of its strategy, payoffs, mass off the legal replies.

    ``method="exact"`` reads probabilities from log-probs (a policy that scores tokens:
    :class:`~llm_zoo.policy.ScoresTokens`); ``"sampled"`` estimates them by sampling any policy
    (for models that reason before answering) and says so in the result.
    """
    if method == "exact":
        table, other = exact_strategy(policy, env_kwargs)
    elif method == "sampled":
        table, other = sampled_strategy(policy, samples, env_kwargs)
    else:
        raise ValueError(f"method must be 'exact' or 'sampled'; got {method!r}")
    intervals = {} if method == "exact" else sampled_intervals(table, other, samples)
    return {
        "method": method if method == "exact" else f"sampled estimate ({samples} replies per info set)",
        **score_strategy(table),
        **intervals,
        "other_mass_mean": sum(other.values()) / len(other),
        "other_mass": other,
        "strategy": table,
    }


class ScoredOnce:
    """A :class:`~llm_zoo.policy.ScoresTokens` policy whose teacher-forced log-probs are computed once per (prompt,
    completion) row and kept: the masked and the unmasked readings of a constrained model ask for the same rows
    (each legal move's canonical reply, then end of turn), and each costs a forward pass over 12 prompts. Every
    other attribute is the policy's own."""

    def __init__(self, policy: ScoresTokens) -> None:
        self._policy = policy
        self._rows: dict[tuple[tuple[int, ...], tuple[int, ...]], list[float]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)

    def logprobs_of(self, prompts_ids: Sequence[Sequence[int]],
                    completions_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        keys = [(tuple(p), tuple(c)) for p, c in zip(prompts_ids, completions_ids, strict=True)]
        missing = [k for k in dict.fromkeys(keys) if k not in self._rows]
        if missing:
            scored = self._policy.logprobs_of([list(p) for p, _ in missing], [list(c) for _, c in missing])
            self._rows.update(zip(missing, scored, strict=True))
        return [list(self._rows[k]) for k in keys]


def evaluate_policies(policies: Mapping[str, Policy], *, method: str = "exact",
                      env_kwargs: Mapping[str, Any] | None = None, **_: Any) -> dict[str, Any]:
    """Evaluate the strategy formed by ``policies["player_0"]`` (first-to-act info sets) and
    ``policies["player_1"]`` (second-to-act info sets); the trainer's headline metric.

    The headline evaluation of ``kuhn_poker_v0``'s spec: exact, so it plays no episodes (it takes
    and ignores the spec contract's ``play``)."""
    reader = exact_strategy if method == "exact" else sampled_strategy
    # a constrained model's masked reading scores the canonical replies the unmasked one scores: once each
    once = {id(p): ScoredOnce(p) for p in policies.values() if isinstance(p, ScoresTokens)}
    policies = {agent: once.get(id(p), p) for agent, p in policies.items()}
    reads: dict[int, tuple[dict, dict]] = {}
    for policy in policies.values():
        if id(policy) not in reads:
            reads[id(policy)] = reader(policy, env_kwargs=env_kwargs)
    table, other = {}, {}
    for info_set in theory.INFO_SETS:
        t, o = reads[id(policies[f"player_{theory.player_of(info_set)}"])]
        table[info_set], other[info_set] = t[info_set], o[info_set]
    intervals = {} if method == "exact" else sampled_intervals(table, other, SAMPLES)
    unmasked = {}
    if all(isinstance(p, ScoresTokens) for p in policies.values()):
        unmasked = unconstrained_figures(policies, env_kwargs)  # beside the masked figures: no decoding mask
    return {"method": method, **score_strategy(table), **intervals,
            "other_mass_mean": sum(other.values()) / len(other), **unmasked, "strategy": table}
