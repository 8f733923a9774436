"""The model-facing text of proposer-solver: prompts, problem views, and reading replies.

Every reply format is parsed here as a pure function of the reply and the mode. A reply that does not
follow its format raises ``ValueError`` whose message is the feedback the agent gets. The problem
view a solver sees has a matching reader (:func:`read_view`), which scripted solvers use so they
know exactly what a model would.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import Any

from llm_zoo.envs.proposer_solver.rules import (
    ALLOWED_IMPORTS,
    INDUCTION_INPUTS,
    MAX_MESSAGE_CHARS,
    MAX_OUTPUT_CHARS,
    MAX_PROBLEM_CHARS,
    MAX_PROGRAM_CHARS,
    Mode,
    Proposal,
    Task,
    canonical,
    read_arguments,
    read_value,
    show,
)
from llm_zoo.envs.proposer_solver.story import GRAMMAR

# ---- prompts ----------------------------------------------------------------------------------

PROPOSER_PROMPT = (
    "You are the proposer. You write one task on a given topic for {n} solvers, who answer it "
    "independently. Every task is checked by running it, so follow the format exactly.\n\n{spec}\n\n"
    "Rules: f is deterministic and finishes within {timeout:g} s; it returns JSON data (None, bool, int, "
    "float, str, and lists or dicts with str keys of them; no tuples or sets) of at most {out} characters "
    "as JSON. The program has at most {prog} characters, imports only {imports}, and does not use eval, "
    "exec, open, input, getattr, attributes that start with _ (x.__class__, x._cache), .format on anything "
    "but a string literal, or a class pattern by position (case Point(a, b); case Point(x=a) is fine); it "
    "writes characters other than ASCII as escapes ('\\u65e5').\n\nReward: {reward}. A task that breaks a rule ends the "
    "episode and scores {penalty:g}."
)
_PROGRAM_FORMAT = "```python\ndef f(x):\n    ...\n```\n"
_INPUT_FORMAT = "INPUT: <the arguments of f as Python literals, as in a call, e.g. [3, 1, 2], 2>"
PROPOSER_SPECS: dict[Mode, str] = {
    Mode.DEDUCTION: ("Mode deduction: a program defining f and one input. The solvers see both and must "
                     "give f's output.\nFormat:\n" + _PROGRAM_FORMAT + _INPUT_FORMAT),
    Mode.ABDUCTION: ("Mode abduction: a program defining f and one input. The solvers see the program and "
                     "f's output on your input, and must find an input that gives that output (any such "
                     "input counts).\nFormat:\n" + _PROGRAM_FORMAT + _INPUT_FORMAT),
    Mode.INDUCTION: (f"Mode induction: a program defining f and {INDUCTION_INPUTS[0]} to {INDUCTION_INPUTS[1]} "
                     "different inputs, one INPUT line each. The solvers see f's outputs on half of the "
                     "inputs, and your optional one-line MESSAGE describing f, and must write f; it is "
                     "checked on all the inputs.\nFormat:\n" + _PROGRAM_FORMAT + _INPUT_FORMAT
                     + "\nINPUT: ...\nMESSAGE: <optional hint>"),
    Mode.INTEGER: ("Mode integer: a word problem whose answer is an integer, and a program defining f() "
                   "with no arguments that returns that answer. The solvers see only the problem. The env reads "
                   "the answer from the problem itself, and f() must agree. " + GRAMMAR + "\n"
                   "Format:\nPROBLEM: <the story>\n```python\ndef f():\n    ...\n```"),
}
REWARD_NOTES = {
    "learnability": "4·p·(1−p), where p is the share of solvers who get it right: 1 when half of them do, "
                    "0 when none or all do",
    "azr": "1 − p when some but not all solvers get it right (p is the share who do), else 0",
}
_CUSTOM_REWARD_NOTE = "a function of the share of solvers who get it right"

SOLVER_PROMPT = "You are a solver. You get one task and answer it on your own.\n{spec}"
SOLVER_SPECS: dict[Mode, str] = {
    Mode.DEDUCTION: ("You see a Python program and a call of f. Give the value the call returns. You may "
                     "reason first; end with one line: ANSWER: <the value as a Python literal, e.g. [1, 'a']>"),
    Mode.ABDUCTION: ("You see a Python program and a value f returned. Find arguments for which f returns "
                     "exactly that value. You may reason first; end with one line: INPUT: <the arguments as "
                     "Python literals, as in a call, e.g. [3, 1], 2>"),
    Mode.INDUCTION: ("You see what a hidden Python function f returns for some inputs, and maybe a hint. "
                     "Write f; it is checked on these inputs and on others. Reply with one ```python block "
                     "defining f; it may import only {imports}."),
    Mode.INTEGER: ("You see a word problem. Give its answer, an integer. Take each sentence literally: a count "
                   "may go below zero (giving away 5 of 3 leaves -2). You may reason first; end with one "
                   "line: ANSWER: <the integer>"),
}


def proposer_prompt(mode: Mode, num_solvers: int, reward: str | None, penalty: float, timeout_s: float,
                    allowed_imports: Sequence[str] = ALLOWED_IMPORTS) -> str:
    """Return the proposer's system prompt (``reward``: a name of ``REWARD_FORMULAS``, None for a custom one)."""
    return PROPOSER_PROMPT.format(n=num_solvers, spec=PROPOSER_SPECS[mode], timeout=timeout_s, out=MAX_OUTPUT_CHARS,
                                  prog=MAX_PROGRAM_CHARS, imports=", ".join(allowed_imports),
                                  reward=REWARD_NOTES.get(reward or "", _CUSTOM_REWARD_NOTE), penalty=-penalty or 0.0)


def solver_prompt(mode: Mode, allowed_imports: Sequence[str] = ALLOWED_IMPORTS) -> str:
    """Return a solver's system prompt."""
    return SOLVER_PROMPT.format(spec=SOLVER_SPECS[mode].format(imports=", ".join(allowed_imports)))


def topic_message(topic: str, mode: Mode) -> str:
    """Tell the proposer its topic and mode."""
    return f"Topic: {topic}\nMode: {mode.value}\nWrite the task."


def problem_view(task: Task) -> str:
    """Return what every solver sees of a task (never the held-out pairs nor integer mode's program)."""
    p = task.proposal
    lines = [f"Mode: {p.mode.value}"]
    if p.mode is Mode.DEDUCTION:
        lines += [f"```python\n{p.program}\n```", f"Call: f({p.inputs[0]})", "What does this call return?"]
    elif p.mode is Mode.ABDUCTION:
        lines += [f"```python\n{p.program}\n```", f"Output: {show(task.outputs[0])}",
                  "Find arguments for which f returns this output."]
    elif p.mode is Mode.INDUCTION:
        lines += [f"f({p.inputs[i]}) == {show(task.outputs[i])}" for i in task.shown]
        lines += [f"Hint: {p.message}"] if p.message else []
        lines += ["Write f."]
    else:
        lines += [p.problem]
    return "\n".join(lines)


def unseen_detail(view: str, shown: str) -> str:
    """Say how the view a solver would be shown (``shown``, as an observation holds it) differs from the
    task's view as graded (``view``): a character observations replace, or a clip."""
    strange = next((a for a, b in zip(view, shown) if a != b and b == "\ufffd"), None)
    if strange is not None:
        return (f"the task holds {strange!r} (U+{ord(strange):04X}), which observations do not show; write "
                f"characters other than ASCII as escapes in string literals ({ascii(strange)})")
    return f"the solvers' view of the task has {len(view)} characters; an observation shows at most {len(shown)}"


def proposer_result(num_correct: int, num_solvers: int, reward: float) -> str:
    """Tell the proposer how its valid task fared."""
    return f"Your task was valid. {num_correct} of {num_solvers} solvers got it right. Your reward: {reward:+.3g}."


def proposer_invalid(code: str, detail: str, penalty: float) -> str:
    """Tell the proposer why its task is invalid."""
    return f"Your task is invalid ({code}): {detail}. Your reward: {-penalty or 0.0:+.3g}."


def solver_result(correct: bool) -> str:
    """Tell a solver whether it was right."""
    return "Your answer is correct." if correct else "Your answer is wrong."


# ---- reading replies --------------------------------------------------------------------------

_CODE_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_KEY_LINE = re.compile(r"^[ \t]*(INPUT|MESSAGE|PROBLEM|ANSWER)[ \t]*:(.*)$", re.IGNORECASE)
_KEYS_OF_MODE = {Mode.DEDUCTION: {"INPUT"}, Mode.ABDUCTION: {"INPUT"}, Mode.INDUCTION: {"INPUT", "MESSAGE"},
                 Mode.INTEGER: {"PROBLEM"}}


def code_blocks(reply: str) -> list[str]:
    """Return the bodies of the reply's fenced code blocks (```python ... ```), in order."""
    return [body.rstrip() for body in _CODE_BLOCK.findall(reply)]


def _keyed_lines(text: str) -> list[tuple[str, str]]:
    """Return ``(KEY, value)`` for each ``KEY: value`` line; later lines without a key continue a PROBLEM."""
    found: list[tuple[str, str]] = []
    for line in text.splitlines():
        match = _KEY_LINE.match(line)
        if match:
            found.append((match.group(1).upper(), match.group(2).strip()))
        elif found and found[-1][0] == "PROBLEM" and line.strip():
            found[-1] = ("PROBLEM", f"{found[-1][1]}\n{line.strip()}".strip())
    return found


def parse_proposal(reply: str, mode: Mode) -> Proposal:
    """Read a proposer's reply as a :class:`Proposal` of ``mode``; ``ValueError`` with feedback if malformed.

    The reply holds exactly one fenced python block and the mode's ``KEY:`` lines outside it; other
    text (reasoning) is ignored. Only the format is checked here: the program's rules are checked
    when the task is validated.
    """
    blocks = list(_CODE_BLOCK.finditer(reply))
    if len(blocks) != 1:
        raise ValueError(f"expected exactly one ```python block defining f; found {len(blocks)}.")
    block = blocks[0]
    fields = _keyed_lines(reply[: block.start()]) + _keyed_lines(reply[block.end():])
    stray = sorted({k for k, _ in fields} - _KEYS_OF_MODE[mode])
    if stray:
        raise ValueError(f"{mode.value} mode takes {' and '.join(sorted(_KEYS_OF_MODE[mode]))} lines; "
                         f"the reply also has {', '.join(stray)}.")
    values = {key: [v for k, v in fields if k == key] for key in ("INPUT", "MESSAGE", "PROBLEM")}
    inputs, messages, problems = values["INPUT"], values["MESSAGE"], values["PROBLEM"]
    low, high = {Mode.INDUCTION: INDUCTION_INPUTS, Mode.INTEGER: (0, 0)}.get(mode, (1, 1))
    if not low <= len(inputs) <= high:
        wanted = f"{low} to {high} INPUT lines" if low != high else f"{low} INPUT line"
        raise ValueError(f"{mode.value} mode takes {wanted}; found {len(inputs)}.")
    read = []
    for i, text in enumerate(inputs):
        try:
            read.append(read_arguments(text))
        except ValueError as exc:
            raise ValueError(f"INPUT line {i + 1}: {exc}.") from None
    if len(messages) > 1 or (messages and len(messages[0]) > MAX_MESSAGE_CHARS):
        raise ValueError(f"give at most one MESSAGE line of at most {MAX_MESSAGE_CHARS} characters.")
    problem = problems[0] if problems else ""
    if mode is Mode.INTEGER and (len(problems) != 1 or not problem or len(problem) > MAX_PROBLEM_CHARS):
        raise ValueError(f"integer mode takes one non-empty PROBLEM of at most {MAX_PROBLEM_CHARS} characters "
                         "before the python block.")
    return Proposal(mode, block.group(1).rstrip(), tuple(read), messages[0] if messages else "", problem)


def _last_keyed(reply: str, key: str) -> str:
    values = [v for k, v in _keyed_lines(reply) if k == key]
    if not values or not values[-1]:
        raise ValueError(f"end your reply with one line: {key}: <...>.")
    return values[-1]


def parse_answer(reply: str, mode: Mode) -> str:
    """Read a solver's reply as its answer; ``ValueError`` with feedback if malformed.

    Returns canonical JSON (deduction), the integer's digits (integer), canonical argument source
    (abduction) or the program (induction). Of several ``ANSWER:``/``INPUT:`` lines the last counts.
    """
    if mode is Mode.INDUCTION:
        blocks = code_blocks(reply)
        if len(blocks) != 1:
            raise ValueError(f"reply with exactly one ```python block defining f; found {len(blocks)}.")
        return blocks[0]
    if mode is Mode.ABDUCTION:
        try:
            return read_arguments(_last_keyed(reply, "INPUT"))
        except ValueError as exc:
            raise ValueError(f"{exc}.") from None
    value = read_value(_last_keyed(reply, "ANSWER"))
    if mode is Mode.INTEGER:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"the answer must be an integer such as 42; got {value!r:.60}.")
        return str(value)
    text = canonical(value)
    if text is None:
        raise ValueError(f"the answer must be exactly JSON data: None, bool, int, float, str, lists [...] and "
                         f"dicts with str keys ({{'1': 2}}, not {{1: 2}}); no tuples or sets; got {value!r:.60}.")
    return text


# ---- reading a problem view -------------------------------------------------------------------


def read_view(content: str) -> dict[str, Any]:
    """Read a solver's problem view back into parts: ``mode`` and, as the mode has them, ``program``,
    ``call`` (argument source), ``output`` (a value), ``pairs`` ((argument source, value) list),
    ``hint`` and ``problem``. ``ValueError`` if it is not a view."""
    lines = content.splitlines()
    if not lines or not lines[0].startswith("Mode: "):
        raise ValueError("not a problem view: it starts with 'Mode: <mode>'")
    mode = Mode(lines[0][len("Mode: "):].strip())
    out: dict[str, Any] = {"mode": mode}
    blocks = code_blocks(content)
    if blocks:
        out["program"] = blocks[0]
    body = lines[1:]
    if mode is Mode.INTEGER:
        out["problem"] = "\n".join(body)
    for line in body:
        if line.startswith("Call: "):
            out["call"] = _call_arguments(line[len("Call: "):])
        elif line.startswith("Output: "):
            out["output"] = ast.literal_eval(line[len("Output: "):])
        elif line.startswith("Hint: "):
            out["hint"] = line[len("Hint: "):]
        elif mode is Mode.INDUCTION and line.startswith("f("):
            compare = ast.parse(line, mode="eval").body
            assert isinstance(compare, ast.Compare)
            out.setdefault("pairs", []).append((_call_arguments(ast.unparse(compare.left)),
                                                ast.literal_eval(compare.comparators[0])))
    return out


def _call_arguments(call_source: str) -> str:
    call = ast.parse(call_source, mode="eval").body
    assert isinstance(call, ast.Call)
    return ", ".join(ast.unparse(a) for a in call.args).encode("ascii", "backslashreplace").decode("ascii")
