"""Smoke test of benchmarks/ray_envs.py at its smallest setting: it runs, collects the same episodes three ways, ends with its JSON line."""

from __future__ import annotations

import json

import pytest

from benchmarks import ray_envs


def test_quick_run_prints_the_table_and_ends_with_the_json_line(capsys):
    pytest.importorskip("ray")
    figures = ray_envs.main(["--quick"])
    out = capsys.readouterr().out.strip().splitlines()
    assert json.loads(out[-1]) == figures
    assert any(line.startswith("ray, 2 workers") for line in out)
    assert figures["same_episodes"] is True  # Ray's episodes are the in-process ones
    for key in ("local_eps_per_s", "ray1_eps_per_s", "ray2_eps_per_s"):
        assert figures[key] > 0
    assert figures["speedup_ray2_vs_ray1"] == pytest.approx(figures["ray2_eps_per_s"] / figures["ray1_eps_per_s"],
                                                            rel=1e-2)
    import ray

    assert not ray.is_initialized()  # the script stopped the cluster it started


def test_bad_budget_is_refused():
    with pytest.raises(SystemExit):
        ray_envs.main(["--episodes", "0"])
