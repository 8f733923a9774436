"""Tests for the turns of one conversation in llm_zoo.scoring: rows read off a longer row's pass give what their own
passes give."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo.scoring import completion_logprobs, plan_nesting  # noqa: E402

torch.set_num_threads(1)
TOLERANCE = 5e-5  # float32 on a CPU: the same attention summed in another padding layout


@pytest.fixture(scope="module")
def tok(byte_tokenizer):
    return byte_tokenizer


@pytest.fixture(scope="module")
def model(tok, tiny_model):
    return tiny_model(tok, seed=5, initializer_range=0.2)


def conversations(seed: int = 0, episodes: int = 3, turns: int = 4):
    """Rows of multi-turn episodes: each turn's prompt is the previous prompt, its reply and the other side's words;
    plus a row of another episode whose reply the next prompt spells otherwise (it nests nowhere)."""
    r = random.Random(seed)
    system = [r.randrange(256) for _ in range(30)]
    prompts, completions = [], []
    for _ in range(episodes):
        prompt = system + [r.randrange(256) for _ in range(r.randrange(3, 12))]
        for _ in range(turns):
            reply = [r.randrange(256) for _ in range(r.randrange(1, 9))]
            prompts.append(list(prompt))
            completions.append(reply)
            prompt = prompt + reply + [r.randrange(256) for _ in range(r.randrange(2, 10))]
    odd = system + [1, 2, 3]
    prompts += [odd, odd + [9, 9, 4, 5]]  # the first reply is [9, 8], the next prompt says [9, 9]
    completions += [[9, 8], [6, 6, 6]]
    order = list(range(len(prompts)))
    r.shuffle(order)  # the plan must not rely on the rows' order
    return [prompts[i] for i in order], [completions[i] for i in order]


def test_each_turn_nests_in_its_episodes_last_turn_and_nothing_else_does():
    prompts, completions = conversations()
    plan = plan_nesting(prompts, completions)
    assert plan is not None
    assert len(plan.prompts) == 3 + 2  # one host per episode, and the two rows that nest nowhere
    for i, (p, c) in enumerate(zip(prompts, completions)):
        host = plan.prompts[plan.host[i]] + plan.completions[plan.host[i]]
        start = len(plan.prompts[plan.host[i]]) + plan.offset[i]
        assert start == len(p) and tuple(host[:start]) == tuple(p)
        assert tuple(host[start:start + len(c)]) == tuple(c)
    assert plan_nesting([[1, 2], [3, 4]], [[5], [6]]) is None  # nothing nests
    assert plan_nesting([[1, 2]], [[5]]) is None


@pytest.mark.parametrize("budget", [None, 60])
def test_nested_scoring_equals_every_row_scored_whole(tok, model, budget):
    prompts, completions = conversations(1)
    kwargs = dict(pad_token_id=tok.pad_token_id, with_entropy=True, with_all_logps=True, temperature=0.8)
    with torch.no_grad():
        nested = completion_logprobs(model, prompts, completions, token_budget=budget, **kwargs)
        whole = completion_logprobs(model, prompts, completions, share_prefix=False, **kwargs)
    assert len(nested) == len(whole) == 4
    mask = whole[1].bool()
    assert torch.equal(nested[1], whole[1])
    for a, b in zip(nested, whole):
        assert a.shape == b.shape
    for a, b in zip(nested[:3], whole[:3]):
        assert torch.allclose(a, b, atol=TOLERANCE, rtol=0)
    assert whole[0][mask].abs().min() > 0  # real log-probs, compared where they are
    assert torch.allclose(nested[3][mask], whole[3][mask], atol=TOLERANCE, rtol=0)


def test_nested_scoring_gives_the_same_gradients_under_gradient_checkpointing(tok, tiny_model):
    prompts, completions = conversations(2)
    model = tiny_model(tok, seed=6, initializer_range=0.2)
    grads = []
    for share in (True, False):
        model.gradient_checkpointing_enable()
        model.train()
        model.zero_grad(set_to_none=True)
        logps, mask, entropy = completion_logprobs(model, prompts, completions, pad_token_id=tok.pad_token_id,
                                                   with_entropy=True, share_prefix=share)
        ((logps * mask).sum() + 0.1 * entropy.sum()).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert grads[0].abs().max() > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-4, rtol=1e-4)


def test_rows_with_a_decoding_mask_or_one_token_replies_keep_their_own_plans(tok, model, monkeypatch):
    from llm_zoo import scoring

    prompts, completions = conversations(3)
    calls = []
    monkeypatch.setattr(scoring, "plan_nesting", lambda *a: calls.append(a) or None)
    allowed = [[list(range(len(tok)))] * len(c) for c in completions]
    ones = [c[:1] for c in completions]
    with torch.no_grad():
        completion_logprobs(model, prompts, completions, pad_token_id=tok.pad_token_id, allowed=allowed)
        completion_logprobs(model, prompts, ones, pad_token_id=tok.pad_token_id)
        assert calls == []
        completion_logprobs(model, prompts, completions, pad_token_id=tok.pad_token_id)
    assert len(calls) == 1  # the same rows unmasked are planned
