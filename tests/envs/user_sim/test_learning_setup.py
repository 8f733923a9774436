"""What the learning setup of user_sim adds: the compact prompt, the template subset, the paraphrasing
user, the do-nothing assistant, the held-in / held-out evaluation with Wilson intervals, the BPE corpus."""

from __future__ import annotations

import pytest

from llm_zoo import models, user_sim_v0
from llm_zoo.envs.core import parse_tool_calls
from llm_zoo.envs.user_sim import scripted as sc
from llm_zoo.envs.user_sim import text
from llm_zoo.models import env_tokenizer
from llm_zoo.spec import EVAL_SEED_BASE
from llm_zoo.trainers.evaluation import headline


def _system(agent, **kwargs):
    env = user_sim_v0.env(**kwargs)
    env.reset(seed=3)
    return env.unwrapped.observe(agent)["messages"][0]["content"]


def test_the_compact_prompt_names_every_tool_and_its_arguments_in_a_sixth_of_the_length():
    full, compact = _system("assistant"), _system("assistant", prompt="compact")
    assert "<tools>" in full and "<tools>" not in compact
    for tool in user_sim_v0.raw_env().tools("assistant"):
        assert f"- {tool.name}({', '.join(tool.parameters['properties'])})" in compact
    assert len(compact) * 6 < len(full)
    assert _system("user", prompt="compact") == _system("user")  # the user's prompt is the same


def test_bad_prompt_and_scenario_options_are_refused_with_the_allowed_values():
    with pytest.raises(ValueError, match="prompt must be one of"):
        user_sim_v0.env(prompt="short")
    with pytest.raises(ValueError, match="scenarios must be a non-empty list"):
        user_sim_v0.env(scenarios=["no_such_template"])
    with pytest.raises(ValueError, match="scenarios must be a non-empty list"):
        user_sim_v0.env(scenarios="cancel_mistake")


def test_episodes_draw_only_from_the_scenario_subset():
    subset = ["cancel_mistake", "default_address_only"]
    env = user_sim_v0.env(scenarios=subset)
    drawn = set()
    for seed in range(40):
        env.reset(seed=seed)
        drawn.add(env.unwrapped.infos["assistant"]["scenario"])
    assert drawn == set(subset)


@pytest.mark.parametrize("prompt", ["full", "compact"])
def test_the_scripted_assistant_solves_every_template_with_either_prompt(prompt):
    for messages in sc.scripted_transcripts(seeds=(5,), prompt=prompt)[::2]:
        assert messages[0]["content"].startswith(text.ASSISTANT_HEAD.format(shop="Brightcart"))
    result = headline("user_sim_v0", {"assistant": sc.scripted()}, seeds=1, env_kwargs={"prompt": prompt})
    assert result["success_rate"] == 1.0


def test_the_paraphrasing_user_says_other_words_for_the_same_goals():
    plain = sc.scripted_transcripts(seeds=(2,))
    para = sc.scripted_transcripts(seeds=(2,), user="scripted_paraphrase")
    changed = 0
    for a, b in zip(plain[::2], para[::2]):
        assert a[0] == b[0]  # the same world and prompt
        said_a = [m["content"] for m in a if m["role"] == "user"]
        said_b = [m["content"] for m in b if m["role"] == "user"]
        assert said_a[0] != said_b[0]  # another greeting and opening
        changed += len(set(said_b) - set(said_a))
    assert changed > 3 * len(plain) // 2
    for voice in sc.PARAPHRASED_VOICES.values():  # every paraphrased yes is a yes to the env
        assert text.is_consent(voice["yes"]) and not text.is_consent(voice["ack"] or "Okay.")
        assert voice["yes"] not in {p["yes"] for p in sc.PERSONAS.values()}


def test_the_scripted_assistant_still_serves_the_paraphrasing_user_on_most_templates():
    result = headline("user_sim_v0", {"assistant": sc.scripted()}, seeds=1, user="scripted_paraphrase")
    assert result["user"] == "scripted_paraphrase"
    assert result["success_rate"] >= 0.8


def test_the_do_nothing_assistant_never_calls_a_tool_and_scores_the_no_change_templates_only():
    result = headline("user_sim_v0", {"assistant": sc.no_tools()}, seeds=1)
    assert result["tool_calls"] == 0
    no_change = [n for n in user_sim_v0.SCENARIOS
                 if any(w in n for w in ("refused", "insists", "expired", "not_delivered", "short", "keep"))]
    assert result["success_rate"] == pytest.approx(len(no_change) / len(user_sim_v0.SCENARIOS), abs=0.03)
    assert 0 < result["success_rate"] < 0.5


def test_evaluation_reports_held_in_and_held_out_apart_on_evaluation_seeds_with_wilson_intervals():
    subset = ["cancel_mistake", "cancel_shipped_refused", "payment_to_paypal"]
    result = headline("user_sim_v0", {"assistant": sc.no_tools()}, seeds=3, env_kwargs={"scenarios": subset},
                      held_in=["cancel_shipped_refused"])
    assert result["eval_seeds"] == [EVAL_SEED_BASE + i for i in range(9)]  # one world per episode
    assert result["episodes"] == 9 and result["held_in_episodes"] == 3 and result["held_out_episodes"] == 6
    # doing nothing is right exactly for the shipped order: all of held-in, none of held-out
    assert (result["held_in_success"], result["held_out_success"]) == (1.0, 0.0)
    assert result["success_rate"] == pytest.approx(1 / 3)
    low, high = result["held_in_success_ci95"]
    assert low == pytest.approx(0.4385, abs=1e-3) and high == 1.0  # Wilson, 3 of 3
    # the headline in the keys `llm-zoo eval` reads, and --headline-episodes: every template alike
    assert (result["headline"], result["interval"], result["seeds"]) == (
        "success_rate", result["success_ci95"], [EVAL_SEED_BASE, EVAL_SEED_BASE + 8])
    more = headline("user_sim_v0", {"assistant": sc.no_tools()}, episodes=7, env_kwargs={"scenarios": subset})
    assert more["episodes"] == 9 and more["seeds"] == [EVAL_SEED_BASE, EVAL_SEED_BASE + 8]
    with pytest.raises(ValueError, match="user must be one of"):
        headline("user_sim_v0", {"assistant": sc.no_tools()}, user="llm")


def test_wilson_interval_matches_known_values():
    low, high = user_sim_v0.wilson_interval(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    assert list(user_sim_v0.wilson_interval(0, 0)) == [0.0, 1.0]
    assert user_sim_v0.wilson_interval(0, 20)[0] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("word_bounded, most_tokens_per_char", [(False, 0.5), (True, 0.6)])
def test_the_bpe_tokenizer_of_the_corpus_writes_tool_calls_byte_for_byte_and_digit_by_digit(word_bounded,
                                                                                            most_tokens_per_char):
    tokenizer = models.build_bpe_tokenizer(sc.corpus(), word_bounded=word_bounded)
    call = '<tool_call>{"name": "get_order", "arguments": {"order_id": "#W9081726"}}</tool_call>'
    ids = tokenizer(call)["input_ids"]
    assert tokenizer.decode(ids) == call and parse_tool_calls(tokenizer.decode(ids))[0].arguments == {
        "order_id": "#W9081726"}
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert [p for p in pieces if any(c.isdigit() for c in p)] == list("9081726")
    assert len(ids) < len(call) * most_tokens_per_char  # merges learned from the env's text
    odd = "ünïcode ✓ 🙂 e-mail: zoë@exämple.org\n\t  two  spaces"
    assert tokenizer.decode(tokenizer(odd)["input_ids"]) == odd
    assert models.build_bpe_tokenizer(sc.corpus(), word_bounded=word_bounded).get_vocab() == tokenizer.get_vocab()


def test_the_envs_tokenizer_gives_an_id_the_same_tokens_where_it_is_read_and_where_it_is_copied():
    """What the assistant must copy (an email, an order id, a name) reaches it in the customer's words and goes out
    in a tool call's JSON: the word-bounded BPE gives it the same tokens in both, the plain BPE does not."""
    from llm_zoo.trainers import presets

    kind = presets.preset("user_sim_v0")["model_tokenizer"]
    assert kind == "bpe_words"
    tokenizer = env_tokenizer(user_sim_v0.SPEC, kind)
    plain = models.build_bpe_tokenizer(sc.corpus())
    pairs = [("My email is ada.dunn99@example.com.", '{"email": "ada.dunn99@example.com"}', "ada.dunn99@example.com"),
             ("Sure. It's order #W7654509.", '{"order_id": "#W7654509"}', "#W7654509"),
             ("My name is Ada Dunn and my zip is 14753.", '{"first_name": "Ada", "last_name": "Dunn"}', "Dunn")]

    def tokens_of(tok, text, span):
        """The tokens covering ``span`` in ``text`` (by character offsets)."""
        start = text.index(span)
        enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
        return [i for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"]) if a < start + len(span) and b > start]

    for said, called, span in pairs:
        assert tokens_of(tokenizer, said, span) == tokens_of(tokenizer, called, span) == tokenizer(
            span, add_special_tokens=False)["input_ids"], span
    # the plain BPE glues the space or quote before a word onto it: the email's first tokens differ
    said, called, span = pairs[0]
    assert tokens_of(plain, said, span) != tokens_of(plain, called, span)
    # it is the word-bounded BPE over the corpus (lossless, digits one by one: the test above)
    assert tokenizer.get_vocab() == models.build_bpe_tokenizer(sc.corpus(), word_bounded=True).get_vocab()


def test_the_default_training_fits_the_scripted_replies_and_warm_starts_on_held_in_templates_only():
    from llm_zoo.trainers import presets

    preset = presets.preset("user_sim_v0")
    scenarios = preset["env_kwargs"]["scenarios"]
    assert scenarios == list(user_sim_v0.LEARNING_SCENARIOS)
    held_in = [o["scenario"] for o in preset["sft"]["options"]]
    assert preset["init"] == "sft" and held_in == list(user_sim_v0.WARM_START_SCENARIOS)
    assert set(held_in) < set(scenarios)  # RL sees templates the warm start never did
    tokenizer = env_tokenizer(user_sim_v0.SPEC, preset["model_tokenizer"])  # what `llm-zoo train user_sim_v0 --set model=tiny` builds
    longest = 0
    for messages in sc.scripted_transcripts(scenarios, seeds=(0, 1), prompt="compact")[::2]:
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        longest = max(longest, *(len(tokenizer(r)["input_ids"]) for r in replies))
        assert sum(m["role"] in ("user", "assistant") and not m["content"].startswith("<tool_call>")
                   for m in messages[1:]) < preset["env_kwargs"]["max_turns"]
    assert longest < preset["max_new_tokens"]  # a reply of the teacher's fits: none is cut
