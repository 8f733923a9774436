"""Tests for the token budget of llm_zoo.scoring and TransformersPolicy: chunked passes give the unchunked results."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo.policies import TransformersPolicy  # noqa: E402
from llm_zoo.policy import PromptTooLong  # noqa: E402
from llm_zoo.scoring import (  # noqa: E402
    allowed_mask,
    completion_logprobs,
    forward_in_chunks,
    left_pad,
    position_ids_of,
    row_chunks,
)
from llm_zoo.trainers.rollout import collect  # noqa: E402

torch.set_num_threads(1)
TOLERANCE = 5e-5  # float32 on a CPU, log-probs down to -17: the same attention summed in another padding layout


@pytest.fixture(scope="module")
def tok(byte_tokenizer):
    return byte_tokenizer


@pytest.fixture(scope="module")
def model(tok, tiny_model):
    return tiny_model(tok, seed=3, initializer_range=0.2)


def batch(seed: int = 0):
    """Rows sharing a system prefix, of ragged lengths, some repeated, completions of 0-8 tokens."""
    r = random.Random(seed)
    shared = [r.randrange(256) for _ in range(40)]
    prompts = [shared + [r.randrange(256) for _ in range(r.randrange(1, 60))] for _ in range(10)]
    prompts += [prompts[0], prompts[3]]
    completions = [[r.randrange(256) for _ in range(r.randrange(0, 9))] for _ in prompts]
    completions[0] = completions[0] or [7]
    return prompts, completions


def test_row_chunks_cover_every_row_in_order_within_the_budget():
    lengths = [5, 9, 3, 30, 2, 2, 2, 8]
    chunks = row_chunks(lengths, 16)
    assert [i for c in chunks for i in c] == list(range(len(lengths)))
    for c in chunks:
        assert len(c) == 1 or len(c) * max(lengths[i] for i in c) <= 16
    assert [3] in chunks  # longer than the budget: alone
    assert row_chunks(lengths, 10**6) == [list(range(len(lengths)))]


@pytest.mark.parametrize("share_prefix", [True, False])
@pytest.mark.parametrize("budget", [1, 40, 150, 400])
def test_chunked_scoring_equals_the_unchunked_pass(tok, model, share_prefix, budget):
    prompts, completions = batch()
    kwargs = dict(pad_token_id=tok.pad_token_id, with_entropy=True, with_all_logps=True, share_prefix=share_prefix,
                  temperature=0.7)
    with torch.no_grad():
        whole = completion_logprobs(model, prompts, completions, **kwargs)
        chunked = completion_logprobs(model, prompts, completions, token_budget=budget, **kwargs)
    assert len(whole) == len(chunked) == 4
    for a, b in zip(whole, chunked):
        assert a.shape == b.shape
        finite = torch.isfinite(a)
        assert torch.equal(finite, torch.isfinite(b))
        assert torch.allclose(a[finite].float(), b[finite].float(), atol=TOLERANCE, rtol=0)


def test_chunked_scoring_gives_the_same_gradients(tok, model):
    prompts, completions = batch(1)
    grads = []
    for budget in (None, 60):
        model.zero_grad(set_to_none=True)
        logps, mask, entropy = completion_logprobs(model, prompts, completions, pad_token_id=tok.pad_token_id,
                                                   with_entropy=True, token_budget=budget)
        ((logps * mask).sum() + entropy.sum()).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    model.zero_grad(set_to_none=True)
    assert grads[0].abs().max() > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-4, rtol=1e-4)


def test_column_chunks_give_the_logits_and_cache_of_one_pass(tok, model):
    prompts, _ = batch(2)
    ids, mask = left_pad(prompts[:3], tok.pad_token_id, torch.device("cpu"))
    with torch.no_grad():
        one = forward_in_chunks(model, ids, mask, position_ids_of(mask), keep=5, token_budget=None, use_cache=True)
        chunked = forward_in_chunks(model, ids, mask, position_ids_of(mask), keep=5, token_budget=3 * 7,
                                    use_cache=True)
    assert chunked.logits.shape == one.logits.shape == (3, 5, len(tok))
    assert torch.allclose(one.logits, chunked.logits, atol=TOLERANCE, rtol=0)


def observation(k: int) -> dict:
    return {"messages": ({"role": "system", "content": "Shared rules of the game. " * 3},
                         {"role": "user", "content": "state " + "x" * (7 * k)})}


@pytest.mark.parametrize("max_new_tokens", [1, 6])
def test_sampling_in_chunks_matches_its_scoring_and_takes_every_row(tok, model, max_new_tokens):
    observations = [observation(k) for k in (4, 0, 9, 2, 4, 7)]
    policy = TransformersPolicy(model, tok, max_new_tokens=max_new_tokens, seed=0, max_forward_tokens=300)
    prompts = policy.encode_prompts(observations)
    assert len(row_chunks(sorted({len(p) + max_new_tokens for p in prompts}), 300)) > 1  # the budget binds
    replies = policy.act(observations)
    assert [r.prompt_ids for r in replies] == prompts
    whole = TransformersPolicy(model, tok, max_new_tokens=max_new_tokens)  # scored in one pass
    scored = whole.logprobs_of([r.prompt_ids for r in replies], [r.completion_ids for r in replies])
    for reply, row in zip(replies, scored):
        assert 1 <= len(reply.completion_ids) <= max_new_tokens
        assert reply.logprobs == pytest.approx(row, abs=1e-4)


def test_a_prompt_over_max_prompt_tokens_is_refused_naming_the_field_and_its_row(tok, model):
    policy = TransformersPolicy(model, tok, max_new_tokens=2, max_prompt_tokens=120)
    lengths = [len(p) for p in policy.encode_prompts([observation(1), observation(20)])]
    assert lengths[0] <= 120 < lengths[1]
    with pytest.raises(PromptTooLong, match="max_prompt_tokens") as info:
        policy.act([observation(1), observation(20)])
    assert info.value.rows == (1,)


def test_collect_fails_only_the_episodes_whose_prompt_is_too_long(tok, model):
    # user_sim's prompts grow with each turn: with a cap between its first and its later prompts,
    # every episode runs a few turns and then ends, failed, with the policy's message
    from llm_zoo.envs.user_sim.scripted import scripted_user

    policy = TransformersPolicy(model, tok, max_new_tokens=4, seed=0)
    free = collect("user_sim_v0", {"user": scripted_user(), "assistant": policy}, 2, seed=0)
    first = min(len(t.prompt_ids) for e in free for t in e.turns if t.prompt_ids)
    capped = TransformersPolicy(model, tok, max_new_tokens=4, seed=0, max_prompt_tokens=first + 200)
    episodes = collect("user_sim_v0", {"user": scripted_user(), "assistant": capped}, 2, seed=0)
    assert all(e.failed for e in episodes)
    assert all("max_prompt_tokens" in e.error for e in episodes)
    assert all(any(t.prompt_ids for t in e.turns) for e in episodes)  # they played until the cap
    assert all(len(t.prompt_ids) <= first + 200 for e in episodes for t in e.turns if t.prompt_ids)


def test_allowed_mask_gives_each_row_its_own_set_when_rows_repeat_sets():
    # rows repeat a few sets (as a Kuhn batch does); the mask is built once a set and gathered, and must
    # equal a row-by-row reading: True only at allowed tokens where a position lists any, True elsewhere
    rng = random.Random(0)
    sets = [None, [[3, 5], [7]], [[3, 5], []], [[2], [9, 1]], [[3, 5], [7], [4]]]
    allowed = [rng.choice(sets) for _ in range(40)] + [[[8]]]  # and one set met once
    width, vocab = 2, 12
    mask = allowed_mask(allowed, width, vocab, torch.device("cpu"))
    assert mask.shape == (len(allowed), width, vocab)
    for i, row in enumerate(allowed):
        for t in range(width):
            tokens = (row or [])[t] if row is not None and t < len(row) else []
            expected = set(tokens) if tokens else set(range(vocab))
            assert {v for v in range(vocab) if mask[i, t, v]} == expected, (i, t, row)
    # every row distinct: no gather, the same answer
    assert torch.equal(allowed_mask(sets[1:], 3, vocab, torch.device("cpu"))[1, 1], torch.ones(vocab, dtype=torch.bool))
