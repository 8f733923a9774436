"""Proposer-solver: one agent proposes verifiable tasks, several solvers attempt them; see :mod:`.env`."""
