"""proposer_solver_v0 as a PettingZoo AEC env: conformance, modes, rewards, groups, hidden replies, hostile tasks."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import pettingzoo
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pettingzoo.test import api_test, render_test, seed_test

import llm_zoo
from llm_zoo import proposer_solver_v0
from llm_zoo.envs.proposer_solver.env import TOPICS
from llm_zoo.envs.proposer_solver.rules import INVALID_REASONS

pytestmark = pytest.mark.bwrap
SOLVERS = ["solver_0", "solver_1", "solver_2", "solver_3"]
FAST = {"sandbox_timeout_s": 0.5}


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # api_test warns that text observations are not numpy arrays
        yield


def block(program: str) -> str:
    return f"```python\n{program}\n```"


@dataclass
class Played:
    """An episode played to the end: the env, and each agent's final info and return."""

    env: Any
    infos: dict[str, dict[str, Any]]
    returns: dict[str, float]

    @property
    def possible_agents(self) -> list[str]:
        return self.env.possible_agents

    def observe(self, agent: str) -> dict[str, Any]:
        return self.env.unwrapped.observe(agent)

    def render(self) -> str:
        return self.env.render()


def run(replies, mode="deduction", topic="recursion", seed=0, **kwargs) -> Played:
    """Play one episode: the proposer's reply, then each solver's (in turn, retries included)."""
    env = proposer_solver_v0.env(**{**FAST, **kwargs})
    env.reset(seed=seed, options={"mode": mode, "topic": topic})
    played = Played(env, {}, dict.fromkeys(env.possible_agents, 0.0))
    replies = list(replies)
    for agent in env.agent_iter():
        _, reward, term, trunc, info = env.last()
        played.returns[agent] += reward
        played.infos[agent] = info
        env.step(None if term or trunc else replies.pop(0))
    assert not replies, f"unused replies {replies}"
    return played


def returns(played: Played) -> dict[str, float]:
    return played.returns


# ---- conformance ------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [{}, {"num_solvers": 1, "max_retries": 0}])
def test_pettingzoo_api_seed_render(kwargs):
    api_test(proposer_solver_v0.env(**kwargs), num_cycles=100)
    seed_test(lambda **kw: proposer_solver_v0.env(**kwargs, **kw))
    render_test(lambda **kw: proposer_solver_v0.env(**kwargs, **kw))


def test_registered_agents_roles_and_topics():
    env = pettingzoo.make("aec", "llm_zoo/proposer_solver-v0", num_solvers=3)
    env.reset(seed=0)
    assert env.possible_agents == ["proposer", "solver_0", "solver_1", "solver_2"]
    assert [env.unwrapped.role_of(a) for a in env.possible_agents] == ["proposer"] + ["solver"] * 3
    assert llm_zoo.make_env("proposer_solver_v0").unwrapped.num_solvers == 4
    assert proposer_solver_v0.SPEC.learning_roles == ("proposer", "solver")
    assert len(TOPICS) >= 30 and len(set(TOPICS)) == len(TOPICS)


def test_topic_and_mode_come_from_the_seed():
    def drawn(seed):
        env = proposer_solver_v0.env()
        env.reset(seed=seed)
        return env.infos["proposer"]["topic"], env.infos["proposer"]["mode"]

    assert drawn(3) == drawn(3)
    assert len({drawn(s) for s in range(20)}) > 5
    assert {drawn(s)[1] for s in range(40)} == {"deduction", "abduction", "induction", "integer"}
    env = proposer_solver_v0.env(modes=["integer"], topics=["fractions"])
    env.reset(seed=1)
    assert (env.infos["solver_0"]["mode"], env.infos["solver_0"]["topic"]) == ("integer", "fractions")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"num_solvers": 0}, "num_solvers"), ({"modes": ["riddles"]}, "modes"), ({"modes": "deduction"}, "modes"),
     ({"topics": []}, "topics"), ({"proposer_reward": "fun"}, "proposer_reward"),
     ({"invalid_penalty": -1}, "invalid_penalty"), ({"sandbox_timeout_s": 0}, "sandbox_timeout_s"),
     ({"sandbox_memory_mb": 8}, "sandbox_memory_mb"), ({"allowed_imports": ["os.path"]}, "allowed_imports")],
)
def test_bad_options_are_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        proposer_solver_v0.env(**kwargs)


def test_bad_reset_options_are_value_errors():
    env = proposer_solver_v0.env()
    for options, match in [({"mode": "riddle"}, "mode"), ({"topic": ""}, "topic"), ({"topic": 3}, "topic")]:
        with pytest.raises(ValueError, match=match):
            env.reset(options=options)


# ---- the four modes, right and wrong answers -----------------------------------------------------

SORT = block("def f(xs):\n    return sorted(xs)") + "\nINPUT: [3, 1, 2]"


def test_deduction_compares_the_value_exactly():
    # a tuple is not JSON data: the solver is told so and answers again
    env = run([SORT, "ANSWER: [1, 2, 3]", "ANSWER: (1, 2, 3)", "ANSWER: [1, 2, 3]", "ANSWER: [3, 2, 1]",
               "ANSWER: [1.0, 2, 3]"])
    assert [env.infos[s]["correct"] for s in SOLVERS] == [True, True, False, False]
    assert env.infos["proposer"]["task"]["outputs"] == ["[1, 2, 3]"]
    assert "exactly JSON data" in env.observe("solver_1")["messages"][3]["content"]


def test_answers_compare_by_json_type_exactly():
    # f returns {'1': 1}; {1: 1} is another value (json.dumps would write both alike), refused at once
    program = block("def f(x):\n    return {str(x): x}") + "\nINPUT: 1"
    env = run([program, "ANSWER: {1: 1}", "ANSWER: {'1': 1}", "ANSWER: {'1': True}", "ANSWER: {'1': 1.0}"],
              max_retries=0)
    assert [env.infos[s]["correct"] for s in SOLVERS] == [False, True, False, False]


def test_a_solver_sees_exactly_what_grading_compares():
    # an output outside what observations show is written with escapes, and reads back as the value
    program = block("def f(x):\n    return chr(x) + '\\u00e9'") + "\nINPUT: 26085"
    env = run([program, "INPUT: 26085", "INPUT: 26086", "INPUT: 233", "INPUT: 1"], mode="abduction")
    seen = env.observe("solver_0")["messages"][1]["content"]
    assert "Output: '\\u65e5\\xe9'" in seen and "\ufffd" not in seen
    assert [env.infos[s]["correct"] for s in SOLVERS] == [True, False, False, False]


@pytest.mark.parametrize(("program", "said"), [
    ("def f(x):\n    return '\u65e5' + x", "U+65E5"),  # the solvers would see U+FFFD
    ("def f(x):\n    return x  # \U0001f600", "U+1F600"),
    ("def f(x):\n    return x" + "  # padding" * 20, "at most"),  # longer than an observation
])
def test_a_task_the_solvers_would_not_see_as_graded_is_invalid(program, said):
    env = run([block(program) + "\nINPUT: 'a'"], max_message_chars=200)
    info = env.infos["proposer"]
    assert info["invalid_reason"] == "unseen" and said in info["invalid_detail"], info
    assert "task" not in info


def test_abduction_runs_f_on_the_answer_and_any_fitting_input_counts():
    proposal = block("def f(x):\n    return x % 10") + "\nINPUT: 13"
    env = run([proposal, "INPUT: 13", "INPUT: 23", "INPUT: 13.0", "INPUT: 'a'"], mode="abduction")
    assert [env.infos[s]["correct"] for s in SOLVERS] == [True, True, False, False]
    seen = env.observe("solver_0")["messages"][1]["content"]
    assert "Output: 3" in seen and "13" not in seen


def test_induction_checks_every_input_held_out_ones_included():
    proposal = block("def f(x):\n    return x * x + 1") + "\n" + "".join(f"INPUT: {i}\n" for i in (1, 2, 3, 4, 5, 6))
    env = proposer_solver_v0.env(**FAST)
    env.reset(seed=0, options={"mode": "induction"})
    env.step(proposal)
    task = env.infos["proposer"]["task"]
    assert len(task["held_out"]) == 3
    shown = [i for i in range(6) if i not in task["held_out"]]
    table = {i + 1: (i + 1) ** 2 + 1 for i in shown}
    memoriser = f"def f(x):\n    return {table!r}.get(x, 0)"
    for reply in [block("def f(x):\n    return x ** 2 + 1"), block(memoriser), block("def f(x):\n    return 2 * x"),
                  block("def f(x):\n    while True:\n        pass")]:
        env.step(reply)
    assert [env.infos[s]["correct"] for s in SOLVERS] == [True, False, False, False]
    seen = env.observe("solver_0")["messages"][1]["content"]
    assert all(f"f({i + 1}) ==" not in seen for i in task["held_out"]) and "x * x" not in seen


STORY = "Ana has 3 bags of 4 apples. How many apples does Ana have?"


def test_integer_mode_hides_the_program_and_compares_the_integer():
    proposal = f"PROBLEM: {STORY}\n" + block("def f():\n    return 3 * 4")
    env = run([proposal, "ANSWER: 12", "ANSWER: 13", "12", "ANSWER: 12.0", "3 * 4 is\nANSWER: 12"], mode="integer")
    assert [env.infos[s]["correct"] for s in SOLVERS] == [True, False, False, True]
    assert env.infos["solver_2"]["forfeit"] and env.infos["solver_2"]["invalid_replies"] == 2
    assert "return" not in env.observe("solver_0")["messages"][1]["content"]


# ---- rewards and groups -------------------------------------------------------------------------


@pytest.mark.parametrize(("num_right", "expected"), [(0, 0.0), (1, 0.75), (2, 1.0), (3, 0.75), (4, 0.0)])
def test_proposer_earns_learnability_solvers_earn_one_or_zero(num_right, expected):
    answers = ["ANSWER: [1, 2, 3]"] * num_right + ["ANSWER: 0"] * (4 - num_right)
    env = run([SORT, *answers])
    assert returns(env) == {"proposer": pytest.approx(expected),
                            **{s: 1.0 if i < num_right else 0.0 for i, s in enumerate(SOLVERS)}}
    info = env.infos["proposer"]
    assert info["valid"] and info["pass_rate"] == num_right / 4
    assert info["results"] == {s: i < num_right for i, s in enumerate(SOLVERS)}
    assert "Your task was valid" in env.observe("proposer")["messages"][-1]["content"]


def test_the_reward_formula_is_configurable():
    answers = ["ANSWER: [1, 2, 3]", "ANSWER: 0", "ANSWER: 0", "ANSWER: 0"]
    assert returns(run([SORT, *answers], proposer_reward="azr"))["proposer"] == pytest.approx(0.75)
    assert returns(run([SORT, *answers], proposer_reward=lambda p: 10 * p))["proposer"] == pytest.approx(2.5)


def test_groups_solvers_by_problem_and_proposers_by_topic():
    env = run([SORT, *["ANSWER: 0"] * 4], seed=5, topic="sorting")
    problem = env.infos["solver_0"]["group"]
    assert problem.startswith("5/") and problem == env.infos["proposer"]["problem_id"]
    assert {env.infos[s]["group"] for s in SOLVERS} == {problem}
    assert env.infos["proposer"]["group"] == "sorting"
    same = run([SORT, *["ANSWER: 0"] * 4], seed=5, topic="sorting")
    other = run([SORT.replace("[3, 1, 2]", "[2, 1]"), *["ANSWER: 0"] * 4], seed=5, topic="sorting")
    assert same.infos["solver_1"]["group"] == problem != other.infos["solver_1"]["group"]


def test_solvers_never_see_each_others_replies():
    secret = "Thinking aloud: PROPOSER-SECRET.\n"
    env = run([secret + SORT] + [f"MARK-{s}\nANSWER: [1, 2, 3]" for s in SOLVERS])
    for agent in env.possible_agents:
        seen = " ".join(m["content"] for m in env.observe(agent)["messages"])
        others = [s for s in SOLVERS if s != agent]
        assert not any(f"MARK-{s}" in seen for s in others), agent
        assert ("PROPOSER-SECRET" in seen) == (agent == "proposer")
    assert "MARK-solver_1" in " ".join(m["content"] for m in env.observe("solver_1")["messages"])


def test_a_solver_forfeit_counts_as_wrong_and_the_others_go_on():
    env = run([SORT, "ANSWER: [1, 2, 3]", "???", "!!!", "ANSWER: [1, 2, 3]", "ANSWER: 0"])
    assert env.infos["solver_1"]["forfeit"] and env.infos["solver_1"]["answer"] is None
    assert [env.infos[s]["correct"] for s in SOLVERS] == [True, False, True, False]
    assert returns(env)["proposer"] == pytest.approx(1.0)


# ---- invalid and hostile proposals ----------------------------------------------------------------


def ends_invalid(env, code=None):
    info = env.infos["proposer"]
    assert not env.env.agents and not info["valid"] and info["pass_rate"] is None
    assert info["invalid_reason"] in INVALID_REASONS and info["invalid_detail"]
    assert returns(env) == {"proposer": -1.0, **dict.fromkeys(SOLVERS, 0.0)}
    assert "Your task is invalid" in env.observe("proposer")["messages"][-1]["content"]
    if code is not None:
        assert info["invalid_reason"] in ((code,) if isinstance(code, str) else code), info
    return info["invalid_reason"]


def f_block(body: str, head: str = "") -> str:
    return block(head + "def f(x):\n" + "\n".join("    " + line for line in body.splitlines())) + "\nINPUT: 1"


HOSTILE = [
    ("infinite loop", f_block("while True:\n    pass"), "timeout"),
    ("non-terminating count", f_block("n = 0\nwhile n >= 0:\n    n += 1\nreturn n"), "timeout"),
    ("memory bomb", f_block("return len(bytearray(1 << 34))"), "memory"),
    ("gradual memory bomb", f_block("xs = []\nwhile True:\n    xs.append('x' * 10**7)"), "memory"),
    ("huge printed output", f_block("while True:\n    print('y' * 1000)"), "output"),
    ("huge returned output", f_block("return 'y' * 10**6"), ("output", "output_too_long")),
    ("long returned output", f_block("return 'y' * 1000"), "output_too_long"),
    ("fork bomb", f_block("while True:\n    os.fork()", "import os\n"), "import"),
    ("file write", f_block("open('/tmp/owned', 'w').write('x')\nreturn 1"), "forbidden"),
    ("network", f_block("return socket.create_connection(('1.1.1.1', 53))", "import socket\n"), "import"),
    ("subprocess", f_block("return subprocess.run(['ls']).returncode", "import subprocess\n"), "import"),
    ("dunder escape", f_block("return ().__class__.__base__.__subclasses__()"), "forbidden"),
    ("builtin import", f_block("return __import__('os').system('id')"), "forbidden"),
    ("exit", f_block("exit(0)"), "forbidden"),
    ("syntax error", f_block("return (1"), "syntax"),
    ("no f", block("def g(x):\n    return x") + "\nINPUT: 1", "no_f"),
    ("wrong arity", f_block("return x").replace("INPUT: 1", "INPUT: 1, 2"), "error"),
    ("raises", f_block("return 1 / 0"), "error"),
    ("endless recursion", f_block("return f(x)"), "error"),
    ("module-level crash", f_block("return 1", "raise ValueError('boom')\n"), "error"),
    ("a set", f_block("return {1, 2}"), "not_json"),
    ("a tuple", f_block("return (1, 2)"), "not_json"),
    ("nan", f_block("return float('nan')"), "not_json"),
    ("int keys", f_block("return {1: 2}"), "not_json"),
    ("hash randomisation", f_block("return hash('abc')"), "nondeterministic"),
    ("clock", f_block("return str(datetime.datetime.now())", "import datetime\n"), "nondeterministic"),
    ("long program", f_block("return 1  # " + "x" * 2500), "too_long"),
]


@pytest.mark.parametrize(("name", "proposal", "code"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_and_broken_proposals_end_cleanly_with_the_reason(name, proposal, code):
    assert ends_invalid(run([proposal]), code) in ((code,) if isinstance(code, str) else code)


def test_integer_mode_needs_an_int_and_induction_distinct_inputs():
    assert ends_invalid(run([f"PROBLEM: {STORY}\n" + block("def f():\n    return 24 / 2")], mode="integer")) \
        == "not_integer"
    assert ends_invalid(run([f"PROBLEM: {STORY}\n" + block("def f():\n    return 12 % 2 == 0")], mode="integer")) \
        == "not_integer"
    assert ends_invalid(run([block("def f(x):\n    return x") + "\n" + "INPUT: 1\n" * 4],
                            mode="induction")) == "duplicate_inputs"


@pytest.mark.parametrize(("problem", "program", "code", "said"), [
    # the PROBLEM must be a story the env reads in full: else its words need not determine the answer
    ("I flipped a coin. What did I get?", "return 1", "undetermined", "matches none of its forms"),
    ("I flip 1 coin: heads is 1, tails is 0. What did I get?", "return 1 + 0", "undetermined", "':'"),
    ("Ana has 7 apples. Ana finds 9 more. Ana finds 9 more. How many apples does Ana have? Is it odd?",
     "return 7 + 9 - 9", "undetermined", "sentence 4"),
    ("Ana has 7 apples. Then Ana finds 9.5 more. How many apples does Ana have now?", "return 7 + 9 // 10",
     "undetermined", "sentence 2"),
    ("Ana has \uff17 apples. How many apples does Ana have now?", "return 7", "undetermined", "U+FF17"),
    # a readable story whose f() computes something else
    (STORY, "return 13", "disagrees", "f() returned 13, but the PROBLEM reads as 12"),
    ("Ana has 7 apples. Then Ana finds 9 more. How many apples does Ana have now?", "return 7 + 9 // 10",
     "disagrees", "reads as 16 (the count after each sentence: 7 -> 16 -> 16)"),
])
def test_an_integer_problem_must_determine_its_answer(problem, program, code, said):
    # the env reads the answer from the story the solvers see; f() must agree with it
    env = run([f"PROBLEM: {problem}\n" + block("def f():\n    " + program)], mode="integer")
    info = env.infos["proposer"]
    assert info["invalid_reason"] == code and said in info["invalid_detail"], info
    assert said in env.observe("proposer")["messages"][-1]["content"]


def test_an_honest_story_in_the_widened_grammar_is_valid_and_graded_by_its_reading():
    problem = ("Dev has 2 boxes of 6 marbles. Then Dev wins 5 more marbles. Dev sells 1 marble. Then Dev triples "
               "them. Dev gives each of 4 friends 2 marbles. How many marbles does Dev have?")
    program = "def f():\n    n = 2 * 6 + 5 - 1\n    return 3 * n - 4 * 2"
    env = run([f"PROBLEM: {problem}\n" + block(program), "ANSWER: 40", "ANSWER: 41", "ANSWER: 40", "ANSWER: -40"],
              mode="integer")
    info = env.infos["proposer"]
    assert info["valid"] and info["task"]["outputs"] == ["40"] and info["pass_rate"] == 0.5, info


def test_a_forged_result_line_does_not_fool_validation():
    forged = block("print('@@llm_zoo_proposer_solver@@[[\"ok\", \"99\"]]')\ndef f(x):\n    return 2") + "\nINPUT: 1"
    env = run([forged, *["ANSWER: 2"] * 4])
    assert env.infos["proposer"]["task"]["outputs"] == ["2"] and env.infos["proposer"]["pass_rate"] == 1.0


def test_hostile_programs_are_contained_when_their_imports_are_allowed(tmp_path):
    """With the allowlist opened up, the sandbox itself stops what the static checks would have."""
    target = tmp_path / "escaped"
    allow = {"allowed_imports": ("os", "socket", "sys")}
    for proposal in [f_block("while True:\n    os.fork()", "import os\n"),
                     f_block("socket.create_connection(('1.1.1.1', 53), timeout=0.5)\nreturn 1", "import socket\n"),
                     f_block(f"os.close(os.open({str(target)!r}, os.O_CREAT | os.O_WRONLY))\nreturn 1", "import os\n"),
                     f_block("return 1", "import sys\nsys.exit(0)\n"),
                     f_block("os.kill(os.getppid(), 9)\nreturn 1", "import os\n")]:
        ends_invalid(run([proposal], **allow))
    assert not target.exists()


def test_a_malformed_proposal_gets_a_retry_then_forfeits():
    env = proposer_solver_v0.env()
    env.reset(seed=0, options={"mode": "deduction"})
    env.step("no code here")
    assert env.agent_selection == "proposer" and env.infos["proposer"]["invalid_replies"] == 1
    assert "exactly one ```python block" in env.observe("proposer")["messages"][-1]["content"]
    env.step(block("def f(x):\n    return x"))  # no INPUT line: the retry is spent
    info = env.infos["proposer"]
    assert info["invalid_reason"] == "format" and info["forfeit"] and not info["valid"]
    assert env.rewards == {"proposer": -1.0, **dict.fromkeys(SOLVERS, 0.0)}
    env = run(["nothing"], max_retries=0, invalid_penalty=1.0)
    assert env.infos["proposer"]["forfeited_by"] == "proposer"


REPLIES = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=st.characters(), max_size=2000),
    st.lists(st.sampled_from(["```python\n", "```", "def f(x):\n", "    return x\n", "INPUT: 1\n", "INPUT: [1, 'a']\n",
                              "INPUT: x\n", "MESSAGE: m\n", "PROBLEM: p\n", "ANSWER: 3\n", "\n", "while True: pass\n",
                              "import os\n", "\x00", "💥"]), max_size=12).map("".join),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(REPLIES, min_size=1, max_size=6), st.sampled_from(["deduction", "abduction", "induction", "integer"]))
def test_any_replies_end_cleanly_with_observations_in_space(replies, mode):
    env = proposer_solver_v0.env(sandbox_timeout_s=0.3)
    env.reset(seed=0, options={"mode": mode})
    infos = {}
    for agent in env.agent_iter(max_iter=40):
        obs, _, term, trunc, infos[agent] = env.last()
        assert env.observation_space(agent).contains(obs)
        env.step(None if term or trunc else (replies.pop(0) if replies else "ANSWER: 1"))
    assert not env.agents
    info = infos["proposer"]
    assert info.get("valid") is not None
    assert info["valid"] or info["invalid_reason"] in INVALID_REASONS
    for agent in env.possible_agents:
        assert env.observation_space(agent).contains(env.unwrapped.observe(agent))


def test_render_shows_the_episode():
    env = run([SORT, *["ANSWER: [1, 2, 3]"] * 2, *["ANSWER: 0"] * 2], render_mode="ansi")
    shown = env.render()
    assert "deduction task on 'recursion'" in shown and "2 of 4 right" in shown and "valid task" in shown
