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


def test_the_config_field_count_the_page_states_is_the_configs():
    import dataclasses

    from llm_zoo.trainers.grpo import TrainConfig

    stated = re.findall(r"`TrainConfig` has (\d+) fields", _text())
    actual = len(dataclasses.fields(TrainConfig))
    assert stated, "docs/architecture.md should state \"`TrainConfig` has N fields\""
    assert {int(n) for n in stated} == {actual}, f"the page says {stated} fields; TrainConfig has {actual}"


def test_each_env_folders_files_are_the_ones_the_page_lists():
    # the page's env-folder table: | `envs/<name>/` | `a.py`, `b.py`, ... | job |
    rows = dict(re.findall(r"^\| `envs/(\w+)/` \| ([^|]*) \|", _text(), flags=re.M))
    folders = sorted(p.name for p in (PACKAGE / "envs").iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert sorted(rows) == folders, f"the page's env table has {sorted(rows)}; envs/ has {folders}"
    for name in folders:
        listed = set(re.findall(r"`([\w.]+\.py)`", rows[name]))
        actual = {p.name for p in (PACKAGE / "envs" / name).glob("*.py")}
        assert listed == actual, f"envs/{name}/: the page lists {sorted(listed)}, the folder has {sorted(actual)}"


def test_the_page_names_no_missing_file_and_keeps_no_changelog():
    text = _text()
    # a repository path with a suffix the repository uses (docs/scaling.md, pyproject.toml, scripts/test.sh);
    # a run's own files (.json, .yaml) are not the repository's
    named = set(re.findall(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.(?:md|toml|sh|yml))\b", text))
    gone = sorted(n for n in named if not _in_repository(n))
    assert gone == [], f"docs/architecture.md names files that are not in the repository: {gone}"
    history = re.findall(r"(?i)\b(?:issue \d+|before and after|changelog)\b", text)
    assert history == [], f"docs/architecture.md keeps history ({history}); the page says what is, git log what was"


def _in_repository(name: str) -> bool:
    """Whether a path the page names is in the repository: from its root or docs/, or (a bare file name) anywhere."""
    if (ROOT / name).exists() or (ROOT / "docs" / name).exists():
        return True
    return "/" not in name and any(p for p in ROOT.rglob(name) if ".venv" not in p.parts and ".git" not in p.parts)
