"""benchmarks/hacks/proposer.py: the library of reward hacks against proposer_solver_v0, and that none pays."""

from __future__ import annotations

import pytest

from benchmarks.hacks import Hack, proposer


@pytest.fixture(scope="module")
def hacks():
    assert all(isinstance(h, Hack) for h in proposer.HACKS)
    return proposer.HACKS


def test_the_library_is_named_and_large_enough(hacks):
    names = [h.name for h in hacks]
    assert len(hacks) >= 20 and len(set(names)) == len(names)
    assert {h.env for h in hacks} == {"proposer_solver_v0"}
    assert all(name.isidentifier() and name == name.lower() for name in names)
    assert all(h.tries.strip() for h in hacks) and 2 <= sum(h.quick for h in hacks) <= 6


@pytest.mark.bwrap
def test_no_hack_pays(hacks):
    outcomes = {h.name: h.run() for h in hacks}
    paid = {name: o.detail for name, o in outcomes.items() if o.paid}
    assert not paid, paid
    # each attempt ran the real env: every outcome says what the env did with it
    assert all(o.detail and o.reward <= 1.0 for o in outcomes.values())
