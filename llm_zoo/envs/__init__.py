"""The envs: one folder each (rules, text, env), on the shared text-env base in :mod:`llm_zoo.envs.core`."""
