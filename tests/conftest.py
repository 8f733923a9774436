"""What many test files share: tiny models and tokenizers built from a config in code, and two requirement markers.

Tiny models (``llm_zoo.models``, random weights, no hub):

- ``byte_tokenizer``: the byte-level tokenizer, every text writable. Shared by the session: a test that changes a
  tokenizer (its template, its tokens) builds its own with ``build_byte_tokenizer()``.
- ``tiny_model(tokenizer=None, *, shape=None, **kwargs)``: a model built by ``build_tiny_model`` over ``tokenizer``
  (default: a byte tokenizer), with ``build_tiny_model``'s own defaults, or a named shape of :data:`SHAPES`
  (``shape="smallest"``), ``kwargs`` over either.
- ``tiny_model_dir(name="tiny", *, shape=None, **kwargs)``: a saved model folder named ``name``, in a temporary
  folder of its own, ``make_tiny_model(...)`` of the same shapes.

Markers, each a skip that says why (``pytest -rs`` lists them; a skip is never a pass):

- ``@pytest.mark.torch``: needs torch and transformers (``pip install 'llm_zoo[llm]'``).
- ``@pytest.mark.bwrap``: needs bubblewrap, the sandbox's runtime (``apt-get install bubblewrap``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SHAPES: dict[str, dict[str, int]] = {
    "smallest": {"hidden_size": 16, "num_layers": 1, "num_heads": 2},
}
"""Named shapes of tiny model, for ``shape=``: ``smallest`` is one layer of width 16 with two heads."""


def _shaped(shape: str | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    if shape is not None and shape not in SHAPES:
        raise ValueError(f"shape= takes one of {sorted(SHAPES)} (tests/conftest.py SHAPES) or None; got {shape!r}")
    return {**(SHAPES[shape] if shape else {}), **kwargs}


def _missing_torch() -> str | None:
    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    return f"needs {' and '.join(missing)}: pip install 'llm_zoo[llm]'" if missing else None


def _missing_bwrap() -> str | None:
    from llm_zoo.sandbox import sandbox_info

    info = sandbox_info()
    return None if info.available else f"needs bubblewrap (apt-get install bubblewrap; CI installs it): {info.problem}"


REQUIREMENTS: dict[str, Callable[[], str | None]] = {"torch": _missing_torch, "bwrap": _missing_bwrap}
"""Marker -> what is missing for the tests it marks (None: nothing). The markers are declared in pyproject.toml."""


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a marked test whose requirement is missing here, saying which and how to install it."""
    for marker in item.iter_markers():
        if marker.name in REQUIREMENTS and (missing := REQUIREMENTS[marker.name]()) is not None:
            pytest.skip(missing)


@pytest.fixture(scope="session")
def byte_tokenizer() -> Any:
    """The byte-level tokenizer of ``llm_zoo.models``, shared by the session: do not change it."""
    pytest.importorskip("transformers")
    from llm_zoo.models import build_byte_tokenizer

    return build_byte_tokenizer()


@pytest.fixture(scope="session")
def tiny_model() -> Callable[..., Any]:
    """Return ``make(tokenizer=None, *, shape=None, **kwargs)``: ``build_tiny_model`` over ``tokenizer`` or a byte
    tokenizer, of the named shape (:data:`SHAPES`) with ``kwargs`` over it."""
    pytest.importorskip("transformers")
    from llm_zoo.models import build_byte_tokenizer, build_tiny_model

    def make(tokenizer: Any = None, *, shape: str | None = None, **kwargs: Any) -> Any:
        return build_tiny_model(build_byte_tokenizer() if tokenizer is None else tokenizer, **_shaped(shape, kwargs))

    return make


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Return ``make(name="tiny", *, shape=None, **kwargs)``: ``make_tiny_model(<a new temporary folder>/name, ...)`` of
    the named shape (:data:`SHAPES`) with ``kwargs`` over it; the folder. Session-wide, so that module fixtures
    may use it; each call saves into a folder of its own."""
    pytest.importorskip("transformers")
    from llm_zoo.models import make_tiny_model

    def make(name: str = "tiny", *, shape: str | None = None, **kwargs: Any) -> Path:
        return make_tiny_model(tmp_path_factory.mktemp(name) / name, **_shaped(shape, kwargs))

    return make
