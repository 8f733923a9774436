"""The scripted players: the assistant solves every scenario against the scripted user, wrong or extra
actions score 0 with the diff, the user plays its persona faithfully, the random tool-caller runs."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_zoo import user_sim_v0
from llm_zoo.envs.user_sim import scripted as sc
from llm_zoo.envs.user_sim import text
from llm_zoo.policy import FunctionPolicy
from llm_zoo.trainers.evaluation import headline
from llm_zoo.trainers.rollout import collect

SEEDS = (0, 1)


def play(assistant, scenario, seed=0, user=None, **env_kwargs):
    """Play one episode; return (final infos of the assistant, rewards, the ansi transcript)."""
    env = user_sim_v0.env(render_mode="ansi", **env_kwargs)
    env.reset(seed=seed, options={"scenario": scenario})
    user = user or sc.scripted_user()
    final, returns = {}, {}
    for agent in env.agent_iter(max_iter=400):
        obs, reward, term, trunc, info = env.last()
        returns[agent] = returns.get(agent, 0.0) + reward
        if term or trunc:
            final = dict(info) if agent == "assistant" else final
            env.step(None)
        else:
            env.step((assistant if agent == "assistant" else user)(obs))
    return final, returns, env.unwrapped.render()


def test_scripted_assistant_solves_every_scenario_against_the_scripted_user():
    names = [n for n in user_sim_v0.SCENARIOS for _ in SEEDS]
    policy = user_sim_v0.SPEC.scripted["scripted"](seed=0)
    episodes = collect(user_sim_v0.env, {"user": policy, "assistant": policy}, [s for _ in user_sim_v0.SCENARIOS
                                                                               for s in SEEDS],
                       options=[{"scenario": n} for n in names], batch_size=16)
    failures = [(e.options["scenario"], e.seed, e.infos["assistant"].get("diff"), e.error)
                for e in episodes if e.failed or e.returns["assistant"] != 1.0]
    assert not failures, failures
    assert all(e.infos["assistant"]["ended_by"] == "stop" for e in episodes)
    assert all(e.returns["user"] == 1.0 for e in episodes)
    assert all(e.infos["assistant"]["invalid_replies"] == 0 for e in episodes)
    # the solver asks before it acts: the user message before each action call is a yes to a proposal
    for e in episodes:
        for turn in e.turns:
            if turn.agent == "assistant" and any(f'"name": "{a}"' in turn.reply for a in sc.world.ACTION_TOOLS):
                said = [m for m in turn.observation["messages"] if m["role"] in ("user", "assistant")]
                assert said[-2]["content"].endswith(sc.SHALL_I) and sc.YES.search(said[-1]["content"])


def test_the_noting_assistant_plays_the_plain_ones_episodes_with_the_task_restated_before_its_tool_calls():
    seeds = [0 for _ in user_sim_v0.SCENARIOS]
    options = [{"scenario": n} for n in user_sim_v0.SCENARIOS]
    plain, noted = (collect(user_sim_v0.env, {"user": p, "assistant": p}, seeds, options=options, batch_size=36)
                    for p in (sc.scripted(seed=0), user_sim_v0.SPEC.scripted["scripted_notes"](seed=0)))
    notes = 0
    for a, b in zip(plain, noted, strict=True):
        assert b.returns == a.returns and b.returns["assistant"] == 1.0, b.options
        # the customer hears the same and the tools run the same calls: the note is the only change
        assert [t.reply for t in b.turns if t.agent == "user"] == [t.reply for t in a.turns if t.agent == "user"]
        replies = [(t.reply, u.reply) for t, u in zip(a.turns, b.turns, strict=True) if t.agent == "assistant"]
        for was, now in replies:
            if now != was:
                note, call = now.split("\n", 1)
                assert call == was and was.startswith("<tool_call>") and note[len("Task: "):-1] in sc.NOTES.values()
                notes += 1
        # every customer here names the request before the first tool call: each call carries it
        assert all(now.startswith("Task: ") for was, now in replies if was.startswith("<tool_call>")), b.options
    assert notes >= 2 * len(plain)  # find_customer and get_customer, at the least


def _mutating(change):
    """The scripted assistant, but ``change(name, arguments)`` edits its action calls."""
    solver = sc.ScriptedAssistant()

    def reply(obs):
        out = solver.reply(list(obs["messages"]))
        calls = re.findall(r"<tool_call>(.*?)</tool_call>", out)
        if len(calls) == 1:
            data = json.loads(calls[0])
            if data["name"] in sc.world.ACTION_TOOLS:
                change(data["name"], data["arguments"])
                return f"<tool_call>{json.dumps(data)}</tool_call>"
        return out

    return FunctionPolicy(reply, name="mutated")


@pytest.mark.parametrize(
    ("scenario", "change", "expected"),
    [
        ("cancel_mistake", lambda n, a: a.update(reason="no longer needed"),
         ".cancel_reason: expected 'ordered by mistake', got 'no longer needed'"),
        ("return_one_of_two", lambda n, a: a.update(item_lines=[1, 2]), ".status: expected 'ordered', got 'return_requested'"),
        ("return_all_to_gift_card", lambda n, a: a.update(refund_payment_id="@order"), "refund_payment_id: expected"),
        ("order_address_pending", lambda n, a: a.update(address="1 Wrong Road, Salem, MA 01970"),
         "expected '"),
    ],
)
def test_wrong_actions_score_zero_with_the_diff(scenario, change, expected):
    def edit(name, arguments):
        change(name, arguments)
        if arguments.get("refund_payment_id") == "@order":  # refund to the order's own card instead of the gift card
            arguments["refund_payment_id"] = env_order_payment[0]

    env_order_payment = []
    probe = user_sim_v0.env()
    probe.reset(seed=0, options={"scenario": scenario})
    order_id = probe.unwrapped.scenario.tasks[0].fact("order id")
    if order_id and order_id.startswith("#"):
        env_order_payment.append(probe.unwrapped._initial["orders"][order_id]["payment_id"])
    info, returns, _ = play(_mutating(edit), scenario)
    assert returns["assistant"] == 0.0 and not info["success"]
    assert any(expected in line for line in info["diff"]), info["diff"]


def test_an_extra_action_scores_zero_with_the_diff():
    """Even with the customer's yes (a user that agrees to anything extra), a change the goal lacks scores 0."""
    solver, user = sc.ScriptedAssistant(), sc.scripted_user()
    extra = "Shall I also update the address on your account? (yes/no)"

    def reply(obs):
        out = solver.reply(list(obs["messages"]))
        sent = " ".join(m["content"] for m in obs["messages"] if m["role"] == "assistant")
        if out.startswith("Done:") and "update_customer_address" not in sent:
            if extra not in sent:
                return extra
            customer = re.search(r'"customer_id": "(C\d+)"', " ".join(m["content"] for m in obs["messages"])).group(1)
            return sc._call(("update_customer_address", {"customer_id": customer, "address": "1 Extra Street, Salem, MA 01970"}))
        return out

    def agreeable(obs):
        return "Yes, go ahead." if obs["messages"][-1]["content"] == extra else user.act([obs])[0]

    info, returns, _ = play(FunctionPolicy(reply), "cancel_mistake", user=agreeable)
    assert returns["assistant"] == 0.0
    assert any(line.startswith("customers[") and "got '1 Extra Street, Salem, MA 01970'" in line for line in info["diff"])
    assert not any(line.startswith("orders[") for line in info["diff"])  # the wanted cancellation itself is right


def test_acting_where_the_goal_is_no_change_scores_zero():
    """Out of stock, the customer keeps the item; an assistant that returns it anyway changed the world.

    The action tools need the customer's yes, so this assistant gets one for the exchange (which
    it cannot make) and returns the item instead.
    """
    solver = sc.ScriptedAssistant()

    def reply(obs):
        out = solver.reply(list(obs["messages"]))
        if "out of stock" in out:
            messages = " ".join(m["content"] for m in obs["messages"])
            order = json.loads(next(m["content"] for m in reversed(obs["messages"])
                                    if m["role"] == "tool" and '"items"' in m["content"]))
            assert order["order_id"] in messages
            if not obs["messages"][-1]["content"].startswith("Yes"):
                wanted = re.search(r"I'd like it in ([^.]+)\.", messages).group(1)
                return f"I'll switch it to {wanted} for you. Shall I go ahead? (yes/no)"
            return sc._call(("return_items", {"order_id": order["order_id"], "item_lines": [1],
                                              "refund_payment_id": order["payment_id"]}))
        return out

    info, returns, _ = play(FunctionPolicy(reply), "exchange_out_of_stock_keep")
    assert returns["assistant"] == 0.0
    assert any("expected 'ordered', got 'return_requested'" in line for line in info["diff"])


def _user_says(scenario, *assistant_lines, seed=0):
    """Feed the scripted user the given assistant messages; return its replies (the opening first)."""
    env = user_sim_v0.env(max_turns=100)
    env.reset(seed=seed, options={"scenario": scenario})
    user = sc.ScriptedUser()
    said = [user.reply(list(env.observe("user")["messages"]))]
    env.step(said[0])
    for line in assistant_lines:
        env.step(line)
        said.append(user.reply(list(env.observe("user")["messages"])))
        env.step(said[-1] if text.STOP not in said[-1] else "(stopped)")
    return said, env.unwrapped.scenario


def test_user_reveals_details_only_when_asked():
    said, scenario = _user_says(
        "return_one_of_two", "Hello! How can I help?", "To verify your identity, please provide your email address.",
        "Thanks. Can I have your order number?", "Which of the items do you want to send back?",
        "Where should the refund go?")
    email = dict(scenario.identity)["email"]
    task = scenario.tasks[0]
    opening, restated, identity, order, items, refund = said
    for early in (opening, restated):
        assert email not in early and task.fact("order id") not in early and "return" in early.lower()
    assert email in identity and task.fact("order id") not in identity
    assert task.fact("order id") in order and email not in order
    assert task.fact("items").split(" (")[0] in items
    assert "original payment method" in refund


def test_user_confirms_only_proposals_that_match_its_goal():
    env = user_sim_v0.env()
    env.reset(seed=0, options={"scenario": "return_one_of_two"})
    task = env.unwrapped.scenario.tasks[0]
    order_id, item = task.fact("order id"), task.fact("items").split(" (")[0]
    other = next(p.split(" (")[0] for p in task.fact("order contents").split("; ") if not p.startswith(item))
    said, _ = _user_says(
        "return_one_of_two",
        f"Shall I cancel order {order_id}?",
        f"Would you like me to return the {item} and the {other} from order {order_id}? (yes/no)",
        f"Would you like me to return the {item} from order #W0000001, refunded to the original payment method?",
        f"Should I return the {item} from order {order_id} and refund it to your gift card?",
        f"Should I return the {item} from order {order_id} and refund it to the original payment method?")
    cancel, both, wrong_order, gift, right = said[1:]
    assert cancel.startswith("No") and both.startswith("No") and wrong_order.startswith("No") and gift.startswith("No")
    assert right.startswith("Yes")


def test_user_falls_back_pushes_back_and_stops():
    said, _ = _user_says("exchange_out_of_stock_then_return", "Sorry, that size is out of stock.")
    assert said[1].startswith("In that case") and "return" in said[1]
    said, _ = _user_says("exchange_out_of_stock_keep", "Unfortunately the size you want is not available.")
    assert "keep" in said[1] and said[1].endswith(text.STOP)
    said, _ = _user_says("cancel_delivered_insists", "I'm sorry, it can't be cancelled: it was delivered.",
                         "I'm afraid I cannot make an exception.")
    assert said[1] == sc.INSIST and said[2].startswith(sc.ACCEPT) and said[2].endswith(text.STOP)


def test_user_moves_to_the_next_task_after_a_done_report():
    said, _ = _user_says("cancel_then_return", "Your order has been cancelled successfully.",
                         "The return has been processed.")
    assert said[1].startswith(sc.NEXT_TASK) and "return" in said[1]
    assert said[2].endswith(text.STOP)


def test_random_tool_caller_runs_and_fails_goals_that_need_actions():
    policy = user_sim_v0.SPEC.scripted["random_tools"](seed=0)
    names = ["cancel_mistake", "return_one_of_two", "exchange_size", "payment_to_paypal", "cancel_shipped_refused"]
    episodes = collect(user_sim_v0.env, {"user": policy, "assistant": policy}, [0] * len(names),
                       options=[{"scenario": n} for n in names], seed=0)
    assert not any(e.failed for e in episodes)
    assert all(e.infos["assistant"]["tool_calls"] > 0 for e in episodes)
    assert [e.returns["assistant"] for e in episodes[:4]] == [0.0] * 4


def test_a_user_only_policy_refuses_the_assistant_seat():
    env = user_sim_v0.env()
    env.reset(seed=0)
    env.step("Hi, I need help.")
    with pytest.raises(ValueError, match="plays only the user seat"):
        sc.scripted_user()(env.observe("assistant"))
    with pytest.raises(ValueError, match="assistant must be"):
        sc.ScriptedPolicy(assistant="oracle")


# (scenario, what an LLM assistant might write, a phrase the scripted user's reply must hold)
LLM_LINES = [
    ("cancel_mistake", "Hello! I'd be happy to help you cancel your order. Could you please provide your email "
                       "address so I can verify your account?", "@example.com"),
    ("cancel_mistake", "Could you provide your order ID and the reason for cancelling?", "by mistake"),
    ("cancel_mistake", "Thanks! Before I proceed, may I ask the reason for the cancellation?", "by mistake"),
    ("cancel_mistake", "Here are the details:\n- Order: @ORDER\n- Reason: ordered by mistake\n\nWould you like me to "
                       "proceed with the cancellation?", "Yes"),
    ("cancel_mistake", "I can cancel @ORDER for you; the reason will be 'no longer needed'. Does that work?", "No"),
    ("cancel_mistake", "Your order @ORDER has been successfully cancelled. Anything else?", "###STOP###"),
    ("cancel_mistake", "I'm sorry, but I'm unable to cancel this order as it has already shipped.", "understand"),
    ("cancel_no_longer_needed_name_zip", "Can I get your full name and zip code?", "my zip code is"),
    ("exchange_size", "Great news, the item is in stock in @WANTED_SHORT. Would you like me to go ahead with the "
                      "exchange?", "Yes"),
    ("exchange_size", "Which size would you prefer instead?", "I'd like it in size"),
    ("exchange_size", "Just to confirm: you'd like to return the item for a refund?", "No"),
    ("return_other_card_then_original", "I apologize, but I cannot process a refund to a different card. Refunds can "
                                        "only go to your original payment method or a gift card.", "In that case"),
    ("return_one_of_two", "Let me look into that for you.", "As I said"),
]


@pytest.mark.parametrize(("scenario", "line", "expected"), LLM_LINES)
def test_user_reads_llm_phrasings(scenario, line, expected):
    probe = user_sim_v0.env()
    probe.reset(seed=0, options={"scenario": scenario})
    task = probe.unwrapped.scenario.tasks[0]
    wanted = task.fact("wanted") or "size X"
    line = line.replace("@ORDER", task.fact("order id") or "").replace("@WANTED_SHORT", wanted.split()[1])
    said, _ = _user_says(scenario, line)
    assert expected in said[1], said[1]


def test_evaluate_policies_scores_the_assistant_against_the_scripted_user():
    figures = headline("user_sim_v0", {"user": None, "assistant": sc.scripted()}, env_kwargs={"max_turns": 30})
    assert figures["success_rate"] == 1.0 and figures["failed"] == 0
    assert figures["episodes"] == len(user_sim_v0.SCENARIOS) and figures["tool_calls"] > 1


USER_LINES = st.one_of(
    st.text(max_size=80),
    st.sampled_from(["I want to cancel", "return it", "exchange please, size L", "My email is @EMAIL", "It's @ORDER",
                     "I don't know the order id, but it's the one with the T-shirt", "yes", "no", "my gift card",
                     "My name is Ada Abbott and my zip code is 12345", "The new address is 1 Oak Street, Salem, MA 01970",
                     "In that case, I'd like to return it instead", "One more thing: I moved", "pay with PayPal",
                     "the T-shirt and the Hoodie", "I ordered it by mistake", "#W0000000", "W@ORDER"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(USER_LINES, min_size=1, max_size=14), st.sampled_from(sorted(user_sim_v0.SCENARIOS)))
def test_scripted_assistant_never_crashes_on_odd_users(lines, scenario):
    env = user_sim_v0.env(max_turns=30)
    env.reset(seed=0, options={"scenario": scenario})
    real = {"@EMAIL": dict(env.unwrapped.scenario.identity)["email"].replace("you don't remember it", "x@y.z"),
            "@ORDER": next(iter(env.unwrapped._initial["orders"]))}
    assistant = sc.scripted()
    for agent in env.agent_iter(max_iter=200):
        obs, _, term, trunc, _ = env.last()
        if term or trunc:
            env.step(None)
        elif agent == "assistant":
            env.step(assistant(obs))
        else:
            line = lines.pop(0) if lines else "###STOP###"
            for placeholder, value in real.items():
                line = line.replace(placeholder, value)
            env.step(line or "hm")
    assert not env.agents


def test_a_failed_episode_counts_as_no_success_in_the_headline():
    from llm_zoo.trainers.rollout import collect

    def play_with_a_failure(*args, **kwargs):
        records = collect("user_sim_v0", *args, **kwargs)
        records[0].failed, records[0].error = True, "env raised (test)"
        return records

    figures = user_sim_v0.SPEC.evaluate({"user": None, "assistant": sc.scripted()}, play=play_with_a_failure,
                                        env_kwargs={"max_turns": 30})
    episodes = len(user_sim_v0.SCENARIOS)
    assert figures["failed"] == 1 and figures["episodes"] == episodes
    assert figures["success_rate"] == (episodes - 1) / episodes  # not 1.0: the failure stays in the mean
