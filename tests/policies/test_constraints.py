"""Constrained decoding: only legal replies are sampled, and their log-probs are the constrained ones."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo.envs.kuhn_poker import text  # noqa: E402
from llm_zoo.envs.kuhn_poker.evaluate import info_set_observation  # noqa: E402
from llm_zoo.models import build_byte_tokenizer, build_word_tokenizer  # noqa: E402
from llm_zoo.policies.constraints import allowed_next, allowed_per_position, legal_paths  # noqa: E402
from llm_zoo.policies.transformers import TransformersPolicy  # noqa: E402
from llm_zoo.scoring import completion_logprobs  # noqa: E402

INFO_SETS = ["K:", "J:bet", "Q:check,bet", "K:check"]


def test_paths_and_allowed_sets():
    paths = [(5, 7, 0), (5, 8, 0), (6, 0)]
    assert allowed_next(paths, []) == [5, 6]
    assert allowed_next(paths, [5]) == [7, 8]
    assert allowed_next(paths, [5, 7]) == [0]
    assert allowed_next(paths, [5, 7, 0]) == []
    assert allowed_per_position(paths, [6, 0]) == [[5, 6], [0]]


def test_legal_paths_end_with_eos_when_the_budget_allows():
    tok = build_word_tokenizer(text.corpus())
    one = legal_paths(tok, ["[bet]", "[check]"], tok.eos_token_id, 1)
    two = legal_paths(tok, ["[bet]", "[check]"], tok.eos_token_id, 2)
    assert all(len(p) == 1 for p in one)
    assert all(len(p) == 2 and p[1] == tok.eos_token_id for p in two)
    with pytest.raises(ValueError, match="no legal reply"):
        legal_paths(tok, [], tok.eos_token_id, 2)


def test_a_legal_reply_longer_than_the_budget_is_refused_not_cut(tiny_model):
    """Cut to one byte, [check] and [bet] would both be "[": the mask would sample a reply the env cannot read."""
    tok = build_byte_tokenizer()
    assert legal_paths(tok, ["[bet]", "[check]"], tok.eos_token_id, 7) == [(*b"[bet]", tok.eos_token_id), (*b"[check]",)]
    with pytest.raises(ValueError, match=r"'\[check\]' is 7 tokens of this tokenizer, more than max_new_tokens=6.*"
                                         r"config\.max_new_tokens.*at least 7"):
        legal_paths(tok, ["[bet]", "[check]"], tok.eos_token_id, 6)
    policy = TransformersPolicy(tiny_model(tok, shape="smallest"), tok, max_new_tokens=1,
                                constrain=True, seed=0)
    with pytest.raises(ValueError, match="max_new_tokens=1"):
        policy.act([{"messages": [{"role": "user", "content": "move"}], "legal_actions": ["[bet]", "[check]"]}])


@pytest.mark.parametrize(("tokenizer", "budget"), [("words", 1), ("words", 3), ("bytes", 10)])
def test_constrained_sampling_gives_legal_replies_with_exact_logprobs(tokenizer, budget, tiny_model):
    tok = build_word_tokenizer(text.corpus()) if tokenizer == "words" else build_byte_tokenizer()
    model = tiny_model(tok, hidden_size=32, initializer_range=0.125)
    policy = TransformersPolicy(model, tok, max_new_tokens=budget, constrain=True, seed=0)
    observations = [info_set_observation(i) for i in INFO_SETS] * 6
    replies = policy.act(observations)
    for obs, reply in zip(observations, replies):
        assert reply in obs["legal_actions"]
    allowed = [allowed_per_position(policy.legal_paths(o), r.completion_ids) for o, r in zip(observations, replies)]
    logps, mask = completion_logprobs(model, [r.prompt_ids for r in replies], [r.completion_ids for r in replies],
                                      pad_token_id=policy.pad_token_id, allowed=allowed)
    for reply, row in zip(replies, logps.tolist()):
        assert max(abs(a - b) for a, b in zip(reply.logprobs, row)) < 1e-4
    # the legal replies of one observation have probabilities summing to 1 under the constraint
    obs = observations[0]
    prompt = policy.encode_prompts([obs])[0]
    paths = policy.legal_paths(obs)
    lp, _ = completion_logprobs(model, [prompt] * len(paths), [list(p) for p in paths],
                                pad_token_id=policy.pad_token_id,
                                allowed=[allowed_per_position(paths, list(p)) for p in paths])
    assert sum(math.exp(sum(row)) for row in lp.tolist()) == pytest.approx(1.0, abs=1e-5)


def test_unconstrained_observations_pass_through(tiny_model):
    tok = build_byte_tokenizer()
    model = tiny_model(tok, hidden_size=32)
    policy = TransformersPolicy(model, tok, max_new_tokens=4, constrain=True, seed=0)
    replies = policy.act([{"messages": ({"role": "user", "content": "hi"},)}] * 3)
    assert all(isinstance(r, str) and r.completion_ids for r in replies)


def test_shared_decoding_runs_each_prompt_and_prefix_once_and_draws_at_the_exact_odds(tiny_model):
    """Constrained rows with the same prompt and tokens so far decode as one row of the model: a batch of 3000 hands at
    two information sets runs a handful of rows a step, and each reply comes at its constrained probability."""
    tok = build_byte_tokenizer()
    model = tiny_model(tok, hidden_size=32, initializer_range=0.5)
    policy = TransformersPolicy(model, tok, max_new_tokens=8, constrain=True, seed=0)
    observations = [info_set_observation("K:")] * 2000 + [info_set_observation("J:bet")] * 1000
    rows_run: list[int] = []
    hook = model.register_forward_pre_hook(lambda _m, args, kw: rows_run.append(kw["input_ids"].shape[0]),
                                           with_kwargs=True)
    try:
        replies = policy.act(observations)
    finally:
        hook.remove()
    assert max(rows_run) <= 4 and len(rows_run) <= 1 + 8  # the prefill of 2 prompts, then <= 2 x 2 groups a step
    for obs in (observations[0], observations[-1]):
        prompt = policy.encode_prompts([obs])[0]
        paths = policy.legal_paths(obs)
        lp, _ = completion_logprobs(model, [prompt] * len(paths), [list(p) for p in paths],
                                    pad_token_id=policy.pad_token_id,
                                    allowed=[allowed_per_position(paths, list(p)) for p in paths])
        got = [r for o, r in zip(observations, replies) if o is obs]
        for path, row in zip(paths, lp.tolist()):
            odds = math.exp(sum(row))
            share = sum(r.completion_ids == list(path) for r in got) / len(got)
            assert abs(share - odds) <= 5 * math.sqrt(odds * (1 - odds) / len(got)) + 1e-9, (obs, path, share, odds)
        assert all(r in obs["legal_actions"] for r in got)
