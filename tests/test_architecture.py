"""docs/architecture.md maps the tree as it is: it names every module and folder of the package, and nothing that is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "llm_zoo"
PAGE = ROOT / "docs" / "architecture.md"


def _text() -> str:
    return PAGE.read_text()


def test_every_module_and_folder_of_the_package_is_named():
    text = _text()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        folder = path.parent.relative_to(PACKAGE).as_posix()
        # a module is named by its path under llm_zoo/, or (the files every env folder shares) by
        # its folder together with its file name
        if rel not in text and not (folder != "." and f"{folder}/" in text and f"`{path.name}`" in text):
            missing.append(rel)
    folders = sorted({p.parent.relative_to(PACKAGE).as_posix() + "/" for p in PACKAGE.rglob("*.py")} - {"./"})
    missing += [f for f in folders if f"`{f}`" not in text and f"### `llm_zoo/{f}`" not in text]
    assert missing == [], f"docs/architecture.md does not name {missing}"


def test_every_path_the_page_names_exists():
    named = set(re.findall(r"`((?:[\w.-]+/)*[\w.-]+\.py)`", _text()))
    names = {p.name for p in PACKAGE.rglob("*.py")}
    # a path is under llm_zoo/ or the repository; a bare file name (in a folder's table) is in some folder
    gone = sorted(n for n in named if not ((PACKAGE / n).exists() or (ROOT / n).exists()
                                           or ("/" not in n and n in names)))
    assert len(named) > 40 and gone == [], f"docs/architecture.md names files that do not exist: {gone}"


def test_each_builtin_envs_headline_evaluation_is_its_folders_evaluate_module():
    import llm_zoo
    from llm_zoo import BUILTIN_ENVS

    for name in BUILTIN_ENVS:
        spec = llm_zoo.env_spec(name)
        folder = name.rpartition("_v")[0]
        assert spec.evaluate is not None, name
        assert spec.evaluate.__module__ == f"llm_zoo.envs.{folder}.evaluate", (name, spec.evaluate.__module__)
        assert spec.evaluate.__name__ == "evaluate_policies"
        assert (PACKAGE / "envs" / folder / "evaluate.py").exists()
