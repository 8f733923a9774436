"""llm_zoo: multi-agent LLM environments with text actions, trainable and comparable.

Each env is a PettingZoo AEC env; import its versioned module and call ``env()``::

    from llm_zoo import kuhn_poker_v0
from llm_zoo.episode import Episode
    env = kuhn_poker_v0.env()

Importing ``llm_zoo`` also registers the envs with PettingZoo's registry, so
``pettingzoo.make("aec", "llm_zoo/kuhn_poker-v0")`` works.
"""

from __future__ import annotations

from llm_zoo import kuhn_poker_v0
from llm_zoo.episode import Episode

__version__ = "0.1.0"

# versioned module name -> module path; the single list the registry, the CLI and the docs read
ENVS: dict[str, str] = {
    "kuhn_poker_v0": "llm_zoo.kuhn_poker_v0",
    "agentic_judge_v0": "llm_zoo.agentic_judge_v0",
    "proposer_solver_v0": "llm_zoo.proposer_solver_v0",
    "user_sim_v0": "llm_zoo.user_sim_v0",
}

__all__ = ["ENVS", "Episode", "kuhn_poker_v0", "make_env", "register"]


def register() -> None:
    """Register every llm_zoo env with PettingZoo's registry as ``llm_zoo/<name>-v<N>`` (idempotent)."""
    import pettingzoo

    for name, module in ENVS.items():
        env_id = "llm_zoo/" + name.replace("_v", "-v")
        if env_id not in pettingzoo.aec_registry:
            pettingzoo.register("aec", env_id, entry_point=f"{module}:env")


def make_env(name: str, **kwargs):
    """Make an env by its versioned name (``"kuhn_poker_v0"``), with the standard wrappers."""
    import importlib

    if name not in ENVS:
        raise ValueError(f"unknown env {name!r}; expected one of {sorted(ENVS)}")
    return importlib.import_module(ENVS[name]).env(**kwargs)


register()
