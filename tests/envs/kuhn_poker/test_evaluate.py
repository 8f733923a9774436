"""The headline evaluation of kuhn_poker_v0 reads a policy through the declared ScoresTokens protocol alone."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

torch = pytest.importorskip("torch")

from llm_zoo import kuhn_poker_v0, models  # noqa: E402
from llm_zoo.envs.kuhn_poker import evaluate, text, theory  # noqa: E402
from llm_zoo.envs.kuhn_poker.rules import Move  # noqa: E402
from llm_zoo.policies import TransformersPolicy  # noqa: E402
from llm_zoo.policy import Observation, Policy, RandomPolicy, Reply, ScoresTokens  # noqa: E402


class UniformScorer(Policy):
    """Scores tokens with neither a model nor a tokenizer: five tokens, each equally likely after any prompt."""

    name = "uniform_scorer"
    WORDS = ("[check]", "[bet]", "[call]", "[fold]", "<end>")
    max_new_tokens = 1
    eos_token_ids = (4,)
    vocab_size = 5

    def __init__(self, constrain: bool = False) -> None:
        self.constrain = constrain
        self.scored: list[int] = []

    def act(self, observations: Sequence[Observation]) -> list[Reply]:
        raise AssertionError("an exact reading never samples")

    def encode_prompts(self, observations: Sequence[Observation]) -> list[list[int]]:
        return [[0] for _ in observations]

    def encode_reply(self, reply: str) -> list[int]:
        return [self.WORDS.index(reply)]

    def decode_replies(self, completions: Sequence[Sequence[int]]) -> list[str]:
        return ["".join(self.WORDS[t] for t in c if t not in self.eos_token_ids) for c in completions]

    def next_token_logprobs(self, prompts_ids: Sequence[Sequence[int]]) -> torch.Tensor:
        self.scored.append(len(prompts_ids))
        return torch.full((len(prompts_ids), self.vocab_size), math.log(1 / self.vocab_size))

    def logprobs_of(self, prompts_ids: Sequence[Sequence[int]], completions_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        self.scored.append(len(prompts_ids))
        return [[math.log(1 / self.vocab_size)] * len(c) for c in completions_ids]


def tiny_policy(max_new_tokens: int = 1) -> TransformersPolicy:
    tokenizer = models.build_word_tokenizer(kuhn_poker_v0.SPEC.corpus())
    model = models.build_tiny_model(tokenizer, hidden_size=32, seed=0)
    return TransformersPolicy(model, tokenizer, max_new_tokens=max_new_tokens, seed=0, device="cpu")


@pytest.mark.parametrize("constrain", [False, True])  # the enumerated reading, then the canonical one
def test_any_policy_that_scores_tokens_is_read_exactly_through_the_protocol_alone(constrain):
    policy = UniformScorer(constrain=constrain)
    assert isinstance(policy, ScoresTokens) and not hasattr(policy, "tokenizer")
    result = kuhn_poker_v0.SPEC.evaluate({"player_0": policy, "player_1": policy}, env_kwargs={})
    # two of the five tokens are legal moves at every info set: uniform over them, 3/5 of the mass elsewhere
    assert result["strategy"] == theory.uniform_policy()
    assert result["exploitability"] == pytest.approx(theory.exploitability(theory.uniform_policy()), abs=1e-12)
    assert result["other_mass_mean"] == pytest.approx(0.6)
    # unconstrained: each legal reply then the end of turn, 1/25 each
    assert result["valid_mass_min"] == pytest.approx(2 / 25) and result["valid_mass_mean"] == pytest.approx(2 / 25)
    assert policy.scored  # it was asked for log-probs


def test_a_policy_that_cannot_score_tokens_is_refused_with_the_way_out_and_read_by_sampling():
    policies = {"player_0": RandomPolicy(seed=0), "player_1": RandomPolicy(seed=1)}
    with pytest.raises(TypeError, match=r"needs a policy that scores tokens \(llm_zoo.policy.ScoresTokens.*got "
                                        r"RandomPolicy.*method='sampled'"):
        kuhn_poker_v0.SPEC.evaluate(policies, env_kwargs={})
    result = kuhn_poker_v0.SPEC.evaluate(policies, env_kwargs={}, method="sampled")
    theory.validate_policy(result["strategy"])
    assert "valid_mass_min" not in result  # the unconstrained figures need log-probs
    assert result["other_mass_mean"] == 0.0  # a random policy picks among the legal replies only


def test_transformers_policy_scores_tokens_as_it_samples():
    policy = tiny_policy(max_new_tokens=2)
    assert isinstance(policy, ScoresTokens)
    assert policy.vocab_size == len(policy.tokenizer)
    observation = evaluate.info_set_observation("Q:bet")
    replies = policy.act([observation] * 8)
    # the reply the protocol decodes from a completion's ids is the one act returned, and it scores them alike
    assert policy.decode_replies([r.completion_ids for r in replies]) == [r.text for r in replies]
    scored = policy.logprobs_of([r.prompt_ids for r in replies], [r.completion_ids for r in replies])
    for reply, lps in zip(replies, scored):
        assert lps == pytest.approx(reply.logprobs, abs=1e-5)
    assert replies[0].prompt_ids == policy.encode_prompts([observation])[0]
    call = policy.encode_reply(text.reply_for(Move.CALL))
    assert policy.decode_replies([call]) == ["[call]"] and policy.eos_token_ids[0] not in call
    first = policy.next_token_logprobs(policy.encode_prompts([observation]))
    assert first.shape == (1, policy.vocab_size) and float(first.exp().sum()) == pytest.approx(1.0, abs=1e-5)
