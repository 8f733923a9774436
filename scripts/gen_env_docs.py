"""Write docs/envs/<name>.md from each env's module docstring (the env's documentation lives in its code)."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import llm_zoo

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    out = ROOT / "docs" / "envs"
    out.mkdir(parents=True, exist_ok=True)
    index = ["# Environments", "", "Generated from each env's module docstring by `scripts/gen_env_docs.py`.", ""]
    for name in sorted(llm_zoo.BUILTIN_ENVS):
        env_module = inspect.getmodule(llm_zoo.env_spec(name).env)
        doc = inspect.getdoc(env_module) or f"# {name}\n\n(no documentation)"
        (out / f"{name}.md").write_text(doc.strip() + "\n")
        title = doc.strip().splitlines()[0].lstrip("# ").strip()
        index.append(f"- [{name}]({name}.md): {title}")
    (out / "README.md").write_text("\n".join(index) + "\n")
    print(f"wrote {len(llm_zoo.BUILTIN_ENVS)} env pages to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
