"""Tests for llm_zoo.policy: Reply, the Policy contract, RandomPolicy and FunctionPolicy."""

from __future__ import annotations

import copy
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest

from llm_zoo.policies import FunctionPolicy, Policy, RandomPolicy, Reply

REPO = Path(__file__).resolve().parents[2]
KUHN_OBS = {
    "messages": (
        {"role": "system", "content": "Kuhn poker."},
        {"role": "user", "content": "You hold the K."},
    ),
    "legal_actions": ("[check]", "[bet]"),
}
TEXT_OBS = {"messages": ({"role": "user", "content": "Say anything."},)}


def full_reply() -> Reply:
    return Reply("[bet]", prompt_ids=[1, 2, 3], completion_ids=[7, 8], logprobs=[-0.5, -0.25], policy="tiny")


# ---- Reply ------------------------------------------------------------------------------------


def test_reply_is_its_text():
    reply = full_reply()
    assert isinstance(reply, str)
    assert reply == "[bet]" and hash(reply) == hash("[bet]")
    assert reply in {"[check]", "[bet]"}
    assert type(reply.text) is str and reply.text == "[bet]"
    assert type(reply.upper()) is str  # string methods return plain str


def test_reply_defaults_to_no_records():
    reply = Reply("hi")
    assert (reply.prompt_ids, reply.completion_ids, reply.logprobs, reply.policy) == (None, None, None, None)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_reply_pickles_with_its_records(protocol):
    reply = full_reply()
    back = pickle.loads(pickle.dumps(reply, protocol=protocol))
    assert type(back) is Reply and back == reply
    assert back.__dict__ == reply.__dict__


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy])
def test_reply_copies_with_its_records(copier):
    reply = full_reply()
    other = copier(reply)
    assert type(other) is Reply and other == reply and other.__dict__ == reply.__dict__


def test_reply_deepcopy_does_not_share_lists():
    reply = full_reply()
    other = copy.deepcopy(reply)
    other.completion_ids.append(9)
    assert reply.completion_ids == [7, 8]


def test_reply_repr_is_readable():
    assert repr(Reply("hi")) == "Reply('hi')"
    assert repr(full_reply()) == (
        "Reply('[bet]', policy='tiny', prompt_ids=<3 tokens>, completion_ids=<2 tokens>, logprob=-0.75)"
    )
    assert len(repr(Reply("x" * 1000))) < 100


def test_reply_unchecked_records_equal_the_checked_reply():
    fast = Reply.unchecked("[bet]", [1, 2, 3], [4, 5], [-0.5, -0.25], "p")
    slow = Reply("[bet]", prompt_ids=[1, 2, 3], completion_ids=[4, 5], logprobs=[-0.5, -0.25], policy="p")
    assert type(fast) is Reply and fast == slow and fast.text == slow.text
    assert fast.__dict__ == slow.__dict__
    assert repr(fast) == repr(slow)
    assert pickle.loads(pickle.dumps(fast)).__dict__ == slow.__dict__


def test_reply_rejects_inconsistent_records():
    with pytest.raises(ValueError, match="one log-prob per completion token: got 1 logprobs for 2"):
        Reply("x", completion_ids=[1, 2], logprobs=[-1.0])
    with pytest.raises(ValueError, match="no completion_ids"):
        Reply("x", logprobs=[-1.0])
    with pytest.raises(TypeError, match="must be a str, got int"):
        Reply(3)  # type: ignore[arg-type]


# ---- Policy contract --------------------------------------------------------------------------


class Echo(Policy):
    name = "echo"

    def act(self, observations):
        self.check_batch(observations, key="messages")
        return [Reply(obs["messages"][-1]["content"], policy=self.name) for obs in observations]


def test_policy_is_abstract():
    with pytest.raises(TypeError):
        Policy()  # type: ignore[abstract]


def test_call_is_act_on_one_observation():
    policy = Echo()
    assert policy(TEXT_OBS) == "Say anything."
    assert policy.act([TEXT_OBS, KUHN_OBS]) == ["Say anything.", "You hold the K."]
    assert policy.act([]) == []


def test_call_checks_the_reply_count():
    class Broken(Policy):
        def act(self, observations):
            return []

    with pytest.raises(RuntimeError, match="returned 0 replies for 1 observation"):
        Broken()(TEXT_OBS)


@pytest.mark.parametrize(
    ("batch", "error", "match"),
    [
        (TEXT_OBS, TypeError, "got a single dict; call policy"),
        ("hello", TypeError, "got a single str"),
        ({1, 2}, TypeError, "sequence \\(list or tuple\\) of observations, got set"),
        (["hello"], TypeError, "observation 0 should be a mapping"),
        ([TEXT_OBS, {"legal_actions": ()}], ValueError, "observation 1 has no 'messages' key"),
    ],
)
def test_check_batch_explains_bad_input(batch, error, match):
    with pytest.raises(error, match=match):
        Echo().act(batch)


# ---- RandomPolicy -----------------------------------------------------------------------------


def test_random_policy_picks_only_legal_actions():
    policy = RandomPolicy(seed=0)
    replies = policy.act([KUHN_OBS] * 200)
    assert set(replies) == {"[check]", "[bet]"}
    assert all(isinstance(r, Reply) and r.policy == "random" for r in replies)


def test_random_policy_writes_text_without_legal_actions():
    policy = RandomPolicy(seed=0, max_chars=8)
    replies = policy.act([TEXT_OBS, {**TEXT_OBS, "legal_actions": ()}] * 50)
    assert all(len(r) <= 8 and r.isprintable() for r in replies)
    assert len(set(replies)) > 10


def test_random_policy_is_seeded_and_leaves_global_random_alone():
    state = random.getstate()
    a = RandomPolicy(seed=1).act([KUHN_OBS, TEXT_OBS] * 20)
    b = RandomPolicy(seed=1).act([KUHN_OBS, TEXT_OBS] * 20)
    assert a == b
    reseeded = RandomPolicy(seed=2)
    reseeded.seed(1)
    assert reseeded.act([KUHN_OBS, TEXT_OBS] * 20) == a
    assert RandomPolicy(seed=2).act([KUHN_OBS, TEXT_OBS] * 20) != a
    assert random.getstate() == state


def test_random_policy_rejects_negative_length():
    with pytest.raises(ValueError, match="max_chars >= 0"):
        RandomPolicy(max_chars=-1)


# ---- FunctionPolicy ---------------------------------------------------------------------------


def always_bet(obs):
    return "[bet]"


def test_function_policy_wraps_a_callable():
    policy = FunctionPolicy(always_bet)
    assert policy.name == "always_bet"
    reply = policy(KUHN_OBS)
    assert reply == "[bet]" and reply.policy == "always_bet"
    assert FunctionPolicy(lambda obs: obs["legal_actions"][0], name="first")(KUHN_OBS).policy == "first"


def test_function_policy_passes_replies_through():
    reply = full_reply()
    assert FunctionPolicy(lambda obs: reply).act([KUHN_OBS])[0] is reply


def test_function_policy_rejects_non_str_replies():
    with pytest.raises(TypeError, match="should return a str reply, got int"):
        FunctionPolicy(lambda obs: 1, name="bad")(KUHN_OBS)
    with pytest.raises(TypeError, match="needs a callable"):
        FunctionPolicy("[bet]")  # type: ignore[arg-type]


# ---- import cost ------------------------------------------------------------------------------


def test_importing_policies_does_not_import_torch():
    code = (
        "import sys, llm_zoo.policies as p; "
        "assert 'TransformersPolicy' in p.__all__; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'heavy import'"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)
