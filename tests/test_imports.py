"""The package's import graph: no cycles, layers import downward only, private names stay home.

The graph is read from the source with :mod:`ast`, not by importing: every ``import`` and
``from ... import`` anywhere in a module (at the top, inside functions, under ``try`` or
``if TYPE_CHECKING``) and every ``importlib.import_module("literal")`` is an edge, so a deferred
import that closes a loop is still a loop. ``from P import x`` is an edge to ``P.x`` when that is
a module of the package, else to ``P``. A string literal in a table (a dict's values, a list,
tuple or set) that is exactly a module's dotted name, or ``module:attr`` (an entry point), is an
edge too: a table of names handed to importlib imports them as surely as an import statement. Parent packages that Python initialises on the way
(``llm_zoo/__init__.py`` when ``llm_zoo.envs.core`` is imported) are not edges: they are what
``__init__`` files import that counts, and those are edges like any other.

Layers, lowest first (a module may import its own layer and those below)::

    0 envs      llm_zoo (the package's face), spec, episode, policy (the policy contract), envs/,
                *_v0 entry modules, sandbox/
    1 policies  policies/, scoring, models, adapters/
    2 trainers  trainers/, crossplay
    3 cli       cli, __main__, serve, bench, plots

Private names: a ``_``-prefixed name (a function, a class, a constant or a module such as
``sandbox._bwrap``) may be imported, or read as an attribute of an imported module, only by a
module of the same package, that is, a file in the same directory as the module that defines
it (``sandbox/runner.py`` may use ``sandbox/_bwrap.py``; ``envs/kuhn_poker/evaluate.py`` may not
use ``policies/transformers.py``'s ``_left_pad``). Dunder names (``__version__``) are not private.

Run as a script (``python tests/test_imports.py``) it prints the figures: modules, edges,
cycles, layer violations and private imports.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "llm_zoo"

LAYERS = ("envs", "policies", "trainers", "cli")
"""Layer names, lowest first."""


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Return every module of the package, dotted name -> file (``pkg/__init__.py`` is ``pkg``)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def layer_of(module: str) -> int:
    """Return the layer index of a dotted module name of llm_zoo."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    if top in ("cli", "__main__", "serve", "bench", "plots"):
        return 3
    if top in ("trainers", "crossplay", "eval"):
        return 2
    if top in ("policies", "scoring", "models", "adapters"):
        return 1
    return 0  # the package itself, spec, episode, policy, envs, the *_v0 modules, sandbox


def _package_of(module: str, path: Path) -> str:
    """Return the package a module belongs to (itself for an ``__init__``)."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _resolve(module: str, path: Path, level: int, name: str | None) -> str:
    if not level:
        return name or ""
    base = _package_of(module, path).split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports(module: str, path: Path, known: set[str]) -> Iterator[tuple[str, str, int]]:
    """Yield (target module, imported name or '', line) for every import in ``module``'s source.

    The name is what ``from target import name`` binds, or the attribute read off an imported
    llm_zoo module (``mod._helper``); '' for a plain module import.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    aliases: dict[str, str] = {}  # local name -> llm_zoo module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "llm_zoo":
                    continue
                yield alias.name, "", node.lineno
                aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path, node.level, node.module)
            if target.split(".")[0] != "llm_zoo":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in known:
                    yield sub, "", node.lineno
                    aliases[alias.asname or alias.name] = sub
                else:
                    yield target, alias.name, node.lineno
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and node.args[0].value.startswith("llm_zoo")):
            yield node.args[0].value, "", node.lineno
        elif isinstance(node, (ast.Dict, ast.List, ast.Tuple, ast.Set)):  # a table of module names
            for item in node.values if isinstance(node, ast.Dict) else node.elts:
                if (isinstance(item, ast.Constant) and isinstance(item.value, str)
                        and item.value.partition(":")[0] in known):
                    yield item.value.partition(":")[0], "", item.lineno
    for node in ast.walk(tree):  # attributes read off imported modules: mod._private
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node.value)
            if dotted is not None and dotted in aliases:
                yield aliases[dotted], node.attr, node.lineno


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def graph(package: Path = PACKAGE) -> tuple[dict[str, Path], dict[str, dict[str, int]], list[tuple]]:
    """Return (modules, module -> {imported module: first line}, private imports).

    A private import is (importer, line, defining module, name).
    """
    mods = modules(package)
    known = set(mods)
    edges: dict[str, dict[str, int]] = {m: {} for m in mods}
    private = []
    for module, path in mods.items():
        home = _package_of(module, path)
        for target, name, line in imports(module, path, known):
            if target not in known:
                continue
            if target != module:
                edges[module].setdefault(target, line)
            if target == module:
                continue
            target_home = _package_of(target, mods[target])
            # a private module (pkg._impl) counts as a private name of its package
            leaf = target.rpartition(".")[2]
            if leaf.startswith("_") and not leaf.startswith("__") and target.rpartition(".")[0] != home:
                private.append((module, line, target.rpartition(".")[0], leaf))
            if name.startswith("_") and not name.startswith("__") and target_home != home:
                private.append((module, line, target, name))
    return mods, edges, sorted(set(private))


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Return the strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def layer_violations(edges: dict[str, dict[str, int]]) -> list[tuple[str, int, str]]:
    """Return (importer, line, imported) for every import of a module from a higher layer."""
    return sorted((m, line, t) for m, targets in edges.items() for t, line in targets.items()
                  if layer_of(t) > layer_of(m))


def report() -> dict[str, object]:
    """Return the figures of the graph (also printed by ``python tests/test_imports.py``)."""
    mods, edges, private = graph()
    return {"modules": len(mods), "edges": sum(map(len, edges.values())), "cycles": cycles(edges),
            "layer_violations": layer_violations(edges), "private_imports": private}


# ---------------------------------------------------------------------------------------------
# TESTS
# ---------------------------------------------------------------------------------------------


def test_the_walker_sees_deferred_imports_and_private_names(tmp_path):
    pkg = tmp_path / "llm_zoo"
    (pkg / "envs").mkdir(parents=True)
    (pkg / "trainers").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "envs" / "__init__.py").write_text("")
    (pkg / "trainers" / "__init__.py").write_text("")
    (pkg / "envs" / "a.py").write_text("def f():\n    from llm_zoo.trainers.b import _helper\n")
    (pkg / "trainers" / "b.py").write_text("import importlib\nimportlib.import_module('llm_zoo.envs.a')\n"
                                           "def _helper():\n    pass\n")
    mods, edges, private = graph(pkg)
    assert edges["llm_zoo.envs.a"] == {"llm_zoo.trainers.b": 2}
    assert edges["llm_zoo.trainers.b"] == {"llm_zoo.envs.a": 2}
    assert cycles(edges) == [["llm_zoo.envs.a", "llm_zoo.trainers.b"]]
    assert layer_violations(edges) == [("llm_zoo.envs.a", 2, "llm_zoo.trainers.b")]
    assert private == [("llm_zoo.envs.a", 2, "llm_zoo.trainers.b", "_helper")]


def test_the_package_graph_has_no_cycles_deferred_imports_included():
    _, edges, _ = graph()
    assert len(edges) > 50  # the walker found the package
    assert cycles(edges) == []


def test_no_module_imports_from_a_higher_layer():
    _, edges, _ = graph()
    assert layer_violations(edges) == []


def test_the_policy_contract_is_in_the_env_layer_and_the_package_imports_it_there():
    _, edges, _ = graph()
    assert layer_of("llm_zoo.policy") == 0 and layer_of("llm_zoo.policies.base") == 1
    # the env layer's policies (every env's scripted players) stand on the contract module itself
    scripted = [m for m in edges if m.startswith("llm_zoo.envs.") and m.endswith(".scripted")]
    assert len(scripted) == 5 and all("llm_zoo.policy" in edges[m] for m in scripted)
    # policies/base.py and policies/tabular.py only re-export it, for imports from outside the package
    shims = {"llm_zoo.policies.base", "llm_zoo.policies.tabular"}
    assert sorted(m for m, targets in edges.items() if shims & set(targets)) == []
    assert all(set(edges[m]) == {"llm_zoo.policy"} for m in shims)


def test_no_module_imports_another_packages_private_names():
    _, _, private = graph()
    assert private == []


if __name__ == "__main__":
    import json

    print(json.dumps(report(), indent=1))
