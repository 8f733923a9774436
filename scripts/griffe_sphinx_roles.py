"""A griffe extension for the documentation site: Sphinx roles in docstrings become code spans.

The package's docstrings name other objects the Sphinx way (``:class:`~llm_zoo.spec.EnvSpec```), which
mkdocstrings' Google-style parser leaves as text; this writes each as the code span a reader expects
(`EnvSpec`: a leading ``~`` keeps the last name, as Sphinx shows it). mkdocs.yml loads it, and
tests/test_docs_site.py checks that no role is left on the built pages.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`([~!.]*)([^`]+)`")


def plain(text: str) -> str:
    """Return ``text`` with each Sphinx role written as a Markdown code span, and reST's ``word::`` before an
    indented block (Markdown's code block already) as ``word:``."""
    text = ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if '~' in m.group(1) else m.group(2)}`", text)
    return re.sub(r"(\S)::\n\n", r"\1:\n\n", text)


class SphinxRoles(griffe.Extension):
    """Rewrite the roles of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        todo: list[griffe.Object] = [pkg]
        while todo:
            obj = todo.pop()
            if obj.docstring is not None:
                obj.docstring.value = plain(obj.docstring.value)
            todo += [member for member in obj.members.values() if not member.is_alias]
