"""Turn a policy spec from the command line or a config into a policy.

A spec is one of: ``human`` (a person at the terminal), ``random``, the name of one of the env's
scripted players (Kuhn poker: ``nash``, ``card``; also written ``scripted:nash``, as a seating in
``train`` writes it: :mod:`llm_zoo.seating`), a model (loaded with transformers: a local
directory, a catalogue name such as ``smollm2-135m``, or a hub name ``owner/name``), or an
``http(s)://`` URL of an OpenAI-compatible endpoint.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from llm_zoo.catalogue import CATALOGUE
from llm_zoo.envs.core import terminal_safe
from llm_zoo.policy import FunctionPolicy, Observation, Policy, RandomPolicy
from llm_zoo.seating import scripted_name


def scripted_players(env_name: str) -> dict[str, Any]:
    """Return the env's scripted players (its spec's ``scripted``), name -> factory(seed=...)."""
    from llm_zoo.spec import env_spec

    return dict(env_spec(env_name).scripted)


def load_policy(spec: str, env_name: str, *, seed: int | None = None, **kwargs: Any) -> Policy:
    """Build the policy that ``spec`` names for env ``env_name``; ``ValueError`` lists the choices."""
    scripted = scripted_players(env_name)
    named = scripted_name(spec)
    if named is not None:
        if named not in scripted:
            raise ValueError(f"unknown scripted player {spec!r} for {env_name}; its scripted players are "
                             f"{sorted(scripted)}")
        return scripted[named](seed=seed)
    if spec == "human":
        return human_policy()
    if spec == "random":
        return RandomPolicy(seed=seed)
    if spec in scripted:
        return scripted[spec](seed=seed)
    if spec.startswith(("http://", "https://")):
        from llm_zoo.policies.openai import OpenAIPolicy

        return OpenAIPolicy.from_spec(spec, **kwargs)
    if names_a_model(spec):
        from llm_zoo.policies.transformers import TransformersPolicy

        return TransformersPolicy.from_pretrained(spec, seed=seed, **kwargs)
    raise ValueError(f"unknown policy {spec!r} for {env_name}; expected 'human', 'random', one of "
                     f"{sorted(scripted)} (or scripted:NAME), a model directory, a catalogue model ({', '.join(sorted(CATALOGUE))}), "
                     "a hub name (owner/name), or an http(s):// endpoint URL")


def names_a_model(spec: str) -> bool:
    """Return whether ``spec`` names a model for transformers: a directory, a catalogue name, or a path or hub
    name (anything with a ``/`` that is not a URL; one that names nothing is told so when it loads)."""
    return not spec.startswith(("http://", "https://")) and (os.path.isdir(spec) or spec in CATALOGUE or "/" in spec)


def human_policy(stream_in=None, stream_out=None) -> Policy:
    """Return a policy that shows a person what the model would see and reads their reply."""
    seen: dict[str, int] = {}

    def ask(obs: Observation) -> str:
        out = stream_out or sys.stdout
        messages = obs["messages"]
        key = messages[0]["content"] if messages else ""
        start = seen.get(key, 0) if seen.get(key, 0) <= len(messages) else 0
        for message in messages[start:]:
            if message["role"] != "assistant":
                # a terminal is an exit for the other agents' text: no escape, bidi override or control reaches it
                print(terminal_safe(f"\n[{message['role']}]\n{message['content']}"), file=out)
        seen[key] = len(messages) + 1  # the reply we are about to give will be the next message
        if obs.get("legal_actions"):
            print(f"(legal: {' '.join(obs['legal_actions'])})", file=out)
        print("> ", end="", file=out, flush=True)
        line = (stream_in or sys.stdin).readline()
        if not line:
            raise EOFError("no more input")
        return line.rstrip("\n")

    return FunctionPolicy(ask, name="human")
