"""Trace the package's run-time call graph through one step of the README's main job; print its figures.

Not a test (pytest collects only ``test_*.py``): the figures go in docs/architecture.md's last
section, before and after a change. Run from the repository root, with the checkout to measure
first on ``PYTHONPATH``::

    PYTHONPATH=. python tests/call_graph.py

It runs ``llm-zoo train kuhn_poker_v0`` (the main job's preset) for one step with its evaluation
and checkpoint, under ``sys.setprofile``, and records every call from a function of one llm_zoo
module into a function of another. Figures: the modules whose code ran; the distinct
(caller module -> callee module) edges; the edges that enter ``trainers/`` from a module outside
it, and ``policies/`` likewise ("returns": each is a place where control that left the room comes
back to it); and the upward edges, from a lower layer into a higher one (tests/test_imports.py's
layers), which are callbacks the import graph does not show.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from tests.test_imports import layer_of  # the checkout's root is on PYTHONPATH (above)


def module_of(filename: str, package_root: Path) -> str | None:
    path = Path(filename)
    try:
        rel = path.resolve().relative_to(package_root.parent)
    except ValueError:
        return None
    parts = list(rel.with_suffix("").parts)
    if not parts or parts[0] != "llm_zoo":
        return None
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else module


def trace() -> dict[str, object]:
    import llm_zoo
    from llm_zoo.trainers import grpo

    root = Path(llm_zoo.__file__).resolve().parent
    edges: dict[tuple[str, str], int] = {}
    ran: set[str] = set()
    cache: dict[str, str | None] = {}

    def mod(code) -> str | None:
        name = code.co_filename
        if name not in cache:
            cache[name] = module_of(name, root)
        return cache[name]

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = mod(frame.f_code)
        if callee is None:
            return
        ran.add(callee)
        back = frame.f_back
        caller = mod(back.f_code) if back is not None else None
        if caller is not None and caller != callee:
            edges[(caller, callee)] = edges.get((caller, callee), 0) + 1

    with tempfile.TemporaryDirectory() as tmp:
        config = grpo.make_config("kuhn_poker_v0", {"steps": 1, "episodes_per_step": 32, "rollout_batch_size": 32,
                                                     "progress": False, "tensorboard": False, "run_dir": tmp})
        sys.setprofile(profile)
        try:
            grpo.train(config)
        finally:
            sys.setprofile(None)
    into = {r: sorted(f"{a} -> {b}" for a, b in edges if b.startswith(f"llm_zoo.{r}.") and
                      not a.startswith(f"llm_zoo.{r}.")) for r in ("trainers", "policies")}
    upward = sorted(f"{a} -> {b}" for a, b in edges if layer_of(b) > layer_of(a))
    return {"modules_run": len(ran), "call_edges": len(edges), "returns_to_trainers": len(into["trainers"]),
            "returns_to_policies": len(into["policies"]), "upward_calls": len(upward),
            "edges_into_trainers": into["trainers"], "edges_into_policies": into["policies"], "upward": upward,
            "modules": sorted(ran)}




def config_footprint(package: Path) -> dict[str, object]:
    """Return where the trainer's config lives: the modules that read a ``TrainConfig`` field
    (``config.<field>``) or hold per-env values for it (a module-level constant whose dict literal has
    2+ field names as keys), and which of those sit outside ``trainers/``. Static, read with :mod:`ast`."""
    import ast

    grpo = ast.parse((package / "trainers" / "grpo.py").read_text())
    cls = next(n for n in ast.walk(grpo) if isinstance(n, ast.ClassDef) and n.name == "TrainConfig")
    fields = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    found = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text())
        reads = any(isinstance(n, ast.Attribute) and n.attr in fields and isinstance(n.value, ast.Name)
                    and n.value.id in ("config", "cfg") for n in ast.walk(tree))
        constants = [n.value for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
                     and all(isinstance(t, ast.Name) and t.id.isupper()
                             for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))]
        # values, not a schema of types (``{"temperature": float}``)
        holds = any(isinstance(n, ast.Dict) and sum(isinstance(k, ast.Constant) and k.value in fields
                                                      and not isinstance(v, ast.Name) for k, v in zip(n.keys, n.values))
                    >= 2 for c in constants for n in ast.walk(c))
        if reads or holds:
            found[path.relative_to(package).as_posix()] = "reads" if reads else "holds values"
    return {"fields": len(fields), "modules": found,
            "outside_trainers": sorted(m for m in found if not m.startswith("trainers/"))}


if __name__ == "__main__":
    import llm_zoo

    print(json.dumps({"config_footprint": config_footprint(Path(llm_zoo.__file__).resolve().parent), **trace()},
                     indent=1))
