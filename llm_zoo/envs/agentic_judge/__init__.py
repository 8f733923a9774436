"""agentic_judge: a solver and an agentic judge on sandboxed coding tasks; docs in :mod:`llm_zoo.envs.agentic_judge.env`."""
