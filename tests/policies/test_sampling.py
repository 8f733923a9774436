"""Tests for llm_zoo.policies.sampling: the one next-token rule of the transformers policy and the server."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_zoo.models import build_byte_tokenizer, build_tiny_model  # noqa: E402
from llm_zoo.policies import TransformersPolicy, sampling  # noqa: E402

torch.set_num_threads(1)

CARDS = [{"messages": ({"role": "user", "content": f"Your card: {c}."},), "legal_actions": ("[check]", "[bet]")}
         for c in "JQK"]

# What the policy sampled for CARDS before the rule moved into llm_zoo.policies.sampling (seed 3,
# max_new_tokens 10, the tiny model of build_tiny_model(seed=0) with its output head scaled): the rule
# may be reorganised, but the same seed must keep giving these tokens and log-probs.
PEAKED_IDS = [[51, 0, 78, 210, 109, 1, 218, 74, 120, 109], [66, 166, 6, 66, 90, 66, 90, 66, 57, 192],
              [202, 189, 22, 134, 149, 66, 166, 6, 66, 169]]
PEAKED_LOGPROBS = [
    [-3.06701, -1.52693, -2.30413, -1.27063, -1.89358, -2.49621, -1.89368, -1.57206, -1.019, -0.42985],
    [-1.11151, -2.06049, -0.11894, -0.06364, -1.53481, -1.63723, -1.70398, -1.9485, -3.59855, -2.56389],
    [-3.68523, -0.92303, -0.46714, -0.39014, -2.03258, -0.92495, -1.97182, -0.15333, -0.06577, -2.34686],
]
CONSTRAINED_TEXTS = ["[bet]", "[check]", "[bet]"]
CONSTRAINED_LOGPROBS = [[0.0, -0.46083, 0.0, 0.0, 0.0, 0.0], [0.0, -0.99779, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                        [0.0, -0.46154, 0.0, 0.0, 0.0, 0.0]]


@pytest.fixture(scope="module")
def tok():
    return build_byte_tokenizer()


def scaled_model(tok, scale: float):
    model = build_tiny_model(tok, seed=0)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(scale)
    return model


def test_a_seeded_policy_samples_the_pinned_sequences(tok):
    # scaled 15x, the most likely token holds about 0.3 of the mass, so top_p=0.8 drops tokens
    policy = TransformersPolicy(scaled_model(tok, 15.0), tok, seed=3, max_new_tokens=10, temperature=0.7, top_p=0.8,
                               device="cpu")  # the pinned numbers are float32 on the CPU
    replies = policy.act(CARDS)
    assert [r.completion_ids for r in replies] == PEAKED_IDS
    for reply, expected in zip(replies, PEAKED_LOGPROBS, strict=True):
        assert reply.logprobs == pytest.approx(expected, abs=2e-5)
    constrained = TransformersPolicy(scaled_model(tok, 1.0), tok, seed=3, max_new_tokens=10, top_p=0.9, device="cpu",
                                     constrain=True)
    replies = constrained.act(CARDS)
    assert [r.text for r in replies] == CONSTRAINED_TEXTS
    for reply, expected in zip(replies, CONSTRAINED_LOGPROBS, strict=True):
        assert reply.logprobs == pytest.approx(expected, abs=2e-5)


def test_per_row_settings_draw_what_each_rows_own_settings_draw():
    """The server's form (a temperature and a top-p per row) picks what the policy's form picks row by row."""
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0)) * 3
    temperatures = [0.7, 1.0, 0.0, 1.3, 0.7, 0.0]
    top_ps = [0.5, 1.0, 0.9, 0.95, 1.0, 1.0]
    uniform = torch.rand(6, 1, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    per_row = sampling.tempered_logprobs(logits, torch.tensor(temperatures))
    tokens = sampling.draw_tokens(per_row, torch.tensor(top_ps), uniform)
    for i, (t, p) in enumerate(zip(temperatures, top_ps, strict=True)):
        alone = sampling.tempered_logprobs(logits[i : i + 1], t)
        assert torch.equal(per_row[i : i + 1], alone), i
        assert int(tokens[i]) == int(sampling.draw_tokens(alone, p, uniform[i : i + 1])[0]), i
    assert torch.equal(sampling.tempered_logprobs(logits, 0.0), torch.log_softmax(logits, dim=-1))  # greedy: at 1


def test_top_p_keeps_the_smallest_set_that_reaches_it_and_the_top_token():
    probs = torch.tensor([[0.1, 0.5, 0.3, 0.1], [0.1, 0.5, 0.3, 0.1]], dtype=torch.float64)
    kept = sampling.top_p_filter(probs, torch.tensor([[0.7], [1e-9]], dtype=torch.float64))
    assert kept.tolist() == [[0.0, 0.5, 0.3, 0.0], [0.0, 0.5, 0.0, 0.0]]
    tiny = sampling.draw_tokens(probs.float().log(), torch.tensor([1e-300, 1e-300]), torch.tensor([[0.0], [0.99]], dtype=torch.float64))
    assert tiny.tolist() == [1, 1]  # 1e-300 is 0 in float32: still the top token, not an empty set
    # a row at top_p 1 keeps every token, even where float32 sums reach 1 before the last one
    tail = torch.tensor([[1.0, 1e-8, 1e-8]])  # in float32 the mass before the second token is already 1
    assert (sampling.draw_tokens(tail.log(), torch.tensor([1.0]), torch.tensor([[1 - 1e-12]], dtype=torch.float64))
            == 2).all()


def test_the_legal_mask_allows_only_the_tokens_that_continue_a_path():
    paths = ((5, 6, 9), (5, 7, 9))
    mask = sampling.legal_mask([paths, paths, None, paths], [(), (5,), (1,), (5, 6, 9)], 10, torch.device("cpu"))
    assert [row.nonzero().flatten().tolist() for row in mask] == [[5], [6, 7], list(range(10)), list(range(10))]


@pytest.mark.parametrize("arithmetic", ["numpy (CPU)", "torch (other devices)"])
def test_inverting_the_cdf_draws_each_token_at_its_share_of_the_mass(arithmetic):
    def invert(probs, uniform):  # the CPU's dispatch to numpy, or the torch path (run here on the CPU)
        return (sampling.invert_cdf if arithmetic.startswith("numpy") else sampling._invert_cdf_torch)(probs, uniform)

    probs = torch.tensor([[0.5, 0.0, 0.2, 0.3, 0.0], [0.0, 0.0, 2.0, 0.0, 6.0]])  # the second unnormalised
    rows = 20_000
    uniform = torch.rand(rows, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for row, expected in zip(probs, ([0.5, 0, 0.2, 0.3, 0], [0, 0, 0.25, 0, 0.75])):
        tokens = invert(row.expand(rows, -1).contiguous(), uniform)
        assert tokens.dtype == torch.int64 and tokens.shape == (rows,)
        counts = torch.bincount(tokens, minlength=5).double() / rows
        expected = torch.tensor(expected, dtype=torch.float64)
        sigma = (expected * (1 - expected) / rows).sqrt()
        assert ((counts - expected).abs() <= 5 * sigma + 1e-12).all(), counts
        assert (counts[expected == 0] == 0).all()  # a token without mass is never drawn
    # the ends of [0, 1): the first token with mass, and the last one (a point rounded up to the total)
    edges = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    assert invert(probs[1].expand(2, -1).contiguous(), edges).tolist() == [2, 4]
    assert invert(torch.tensor([[0.0, 0.3, 0.7, 0.0]]).expand(2, -1).contiguous(), edges).tolist() == [1, 2]
    with pytest.raises(ValueError, match=r"row\(s\) \[1\] has no finite positive mass"):
        invert(torch.tensor([[0.1, 0.9], [float("nan"), 0.5]]), edges)
    with pytest.raises(ValueError, match=r"row\(s\) \[0\] has no finite positive mass"):
        invert(torch.tensor([[0.0, 0.0], [0.5, 0.5]]), edges)


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.8), (0.0, 1.0)])
def test_a_shared_draw_picks_what_each_rows_own_draw_picks(temperature, top_p):
    """draw_shared computes a distribution per kind; each row gets the token and log-prob next_tokens gives it alone."""
    logits = torch.randn(4, 60, generator=torch.Generator().manual_seed(0)) * 3
    logits[1, 10:] = float("-inf")  # a constrained kind
    logits[3, :] = float("-inf")
    logits[3, 7] = 0.0  # one legal token
    kind_of = torch.randint(0, 4, (300,), generator=torch.Generator().manual_seed(1)).tolist()
    tokens, logprobs = sampling.draw_shared(logits, kind_of, temperature=temperature, top_p=top_p,
                                            generator=torch.Generator().manual_seed(2))
    alone, alone_logprobs = sampling.next_tokens(logits[kind_of], temperature=temperature, top_p=top_p,
                                                 generator=torch.Generator().manual_seed(2))
    assert tokens == alone.tolist()
    assert logprobs == pytest.approx(alone_logprobs.tolist(), abs=1e-6)
    assert all(t < 10 for t, k in zip(tokens, kind_of) if k == 1) and all(t == 7 for t, k in zip(tokens, kind_of) if k == 3)
    if temperature == 1.0:  # rows of one kind draw tokens of their own, not one token for the kind
        assert len({t for t, k in zip(tokens, kind_of) if k == 0}) > 1
