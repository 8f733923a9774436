"""llm_zoo: multi-agent LLM environments with text actions, trainable and comparable.

Each env is a PettingZoo AEC env; import its versioned module and call ``env()``, or make it by
name through the registry::

    from llm_zoo import kuhn_poker_v0
    env = kuhn_poker_v0.env()
    env = llm_zoo.make_env("kuhn_poker_v0")

The package knows an env only through its :class:`~llm_zoo.spec.EnvSpec` (``SPEC`` in each
versioned module); envs written elsewhere join with ``llm_zoo.register(spec)`` or the
``llm_zoo.envs`` entry-point group (read when ``llm_zoo`` is imported; their modules load on first
use), and every command takes them by name. Every registered env is also in PettingZoo's registry:
``pettingzoo.make("aec", "llm_zoo/kuhn_poker-v0")``.
"""

from __future__ import annotations

from llm_zoo import kuhn_poker_v0
from llm_zoo.episode import Episode
from llm_zoo.spec import EnvSpec, env_spec, make_env, read_entry_points, register, register_lazy, registered

__version__ = "0.1.0"

BUILTIN_ENVS: dict[str, str] = {
    "kuhn_poker_v0": "llm_zoo.kuhn_poker_v0:SPEC",
    "leduc_poker_v0": "llm_zoo.leduc_poker_v0:SPEC",
    "agentic_judge_v0": "llm_zoo.agentic_judge_v0:SPEC",
    "proposer_solver_v0": "llm_zoo.proposer_solver_v0:SPEC",
    "user_sim_v0": "llm_zoo.user_sim_v0:SPEC",
}
"""The envs that ship with llm_zoo: versioned name -> where its spec is (loaded on first lookup)."""

for _name, _target in BUILTIN_ENVS.items():
    register_lazy(_name, _target)
del _name, _target
register(kuhn_poker_v0.SPEC, replace=True)  # imported above already: load it now
read_entry_points()  # installed packages' envs: by name here and in PettingZoo's registry (their modules load later)

__all__ = ["BUILTIN_ENVS", "EnvSpec", "Episode", "env_spec", "kuhn_poker_v0", "make_env", "register",
           "registered"]
