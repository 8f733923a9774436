"""Checkpoints: everything a run needs to resume exactly, written atomically, read back safely, and finding them again.

A checkpoint is a directory ``runs/<run>/checkpoints/step_NNNNNN`` holding, per learner, the
policy it delivers under ``policies/NAME`` (``save_pretrained`` format: what ``llm-zoo eval`` and
``crossplay`` load; with LoRA only the adapters, whose ``adapter_config.json`` names the base model),
``NAME.trainer.pt`` (self-play pool, reference model, and the learner's own trained weights when
``policies/`` holds their average) and ``NAME.optimizer.pt`` (the optimiser's state, which only
``--resume`` reads: only the newest checkpoint keeps it, an older one drops it once a newer is in place),
plus ``state.json`` (the step, the RAE baselines,
torch's RNG) and ``manifest.json`` (each file's size and SHA-256). It is written to a
temporary directory and renamed into place, then ``checkpoints/latest`` is rewritten the same way,
so a run killed at any instant leaves either the old checkpoint or the new one, never half of one.

In code a checkpoint is a :class:`Checkpoint` record: the step, the RAE state, and per policy a
:class:`PolicyCheckpoint` (model, tokenizer, optimiser, and the trainer's extras: the trained weights
beside their average, the reference, the pool, the prompts met). ``train`` and ``sft`` both write it
with :func:`save_checkpoint`, and ``--resume`` reads it with :func:`load_checkpoint`; ``init``, eval,
play, serve and crossplay read ``policies/NAME`` alone (:func:`init_checkpoint` finds them).

Reading is as careful as writing, since a checkpoint is a file a user hands in. ``NAME.trainer.pt``
holds plain data only (tensors, numbers, strings, lists, dicts) and is read with
``torch.load(weights_only=True)``, which refuses any pickled object that would run code; weights
are safetensors; every file is checked against the manifest; and whatever is wrong (a truncated or
corrupted file, a missing key, a value of the wrong type) is one :class:`CheckpointError` that
names the file, what was expected and what to do, never a traceback from deep inside a loader.

A run directory is owned by one run (:func:`own_run_dir`): ``train`` holds an exclusive lock on
``run.lock`` while it writes (``fcntl.flock``: the kernel drops it when the process ends, crash
or kill included) and refuses to start afresh where a run already wrote, unless told to overwrite.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import hashlib
import json
import math
import os
import shutil
import socket
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from llm_zoo.trainers.advantages import RAEState
from llm_zoo.trainers.curriculum import CurriculumState

__all__ = ["RUN_ENTRIES", "Checkpoint", "CheckpointError", "PolicyCheckpoint", "init_checkpoint", "latest_checkpoint",
           "latest_run", "load_checkpoint", "own_run_dir", "read_json", "resume_dir", "save_checkpoint",
           "trained_state", "verify_checkpoint", "write_atomic"]

MANIFEST = "manifest.json"
LOCK = "run.lock"
RUN_ENTRIES = ("config.json", "config.yaml", "metrics.jsonl", "eval.json", "checkpoints", "samples", "sft", "vllm",
               "tensorboard", "curves.png")
"""What a training run writes into its directory: any of them there means the directory holds a run."""
STATE_KEYS = {"step": int, "rae": dict, "policies": list, "torch_rng": list}
TRAINER_KEYS = {"optimizer": (dict, type(None)), "pool": list, "reference": (dict, type(None)),
                "learner": (dict, type(None)), "met": list}
"""``optimizer`` is None where the state is in ``NAME.optimizer.pt`` (checkpoints before that held it here)."""
OPTIMIZER = ".optimizer.pt"
"""``NAME`` + this: a learner's optimiser state, in the newest checkpoint of a run only."""


class CheckpointError(ValueError):
    """A checkpoint or run directory that cannot be used as it is; the message names the file and the fix."""


# ---------------------------------------------------------------------------------------------
# The record
# ---------------------------------------------------------------------------------------------


@dataclass
class PolicyCheckpoint:
    """One policy of a checkpoint: ``policies/NAME`` (model and tokenizer), ``NAME.trainer.pt`` and ``NAME.optimizer.pt``.

    The modules and the optimiser are the live ones: :func:`save_checkpoint` reads them, and
    :func:`load_checkpoint` fills them in place (built as the run builds them, from its config).
    """

    model: torch.nn.Module
    """The policy delivered: ``policies/NAME`` in ``save_pretrained`` form (with LoRA the adapters alone, naming
    their base), what eval, play, serve, crossplay and ``init`` load."""
    tokenizer: Any
    """Saved beside the model in ``policies/NAME``."""
    optimizer: torch.optim.Optimizer | None = None
    """Its state is ``NAME.optimizer.pt``, which only ``--resume`` reads; None writes (and reads) none."""
    learner: torch.nn.Module | None = None
    """The weights the optimiser trains when ``model`` is their average (``average_ema``), kept in
    ``NAME.trainer.pt``; None when ``model`` is the trained model itself."""
    reference: torch.nn.Module | None = None
    """The frozen KL reference (``beta``), or None."""
    pool: list[tuple[int, dict[str, torch.Tensor]]] = field(default_factory=list)
    """The self-play pool: (step, weights) snapshots."""
    met: dict[tuple[int, ...], tuple[str, ...]] = field(default_factory=dict)
    """The prompts the trained turns met, with their legal replies (``unmask_steps``)."""


@dataclass
class Checkpoint:
    """Everything a run needs to continue after ``step`` steps: per policy its record, and the run's own state.

    ``train`` and ``sft`` write it with :func:`save_checkpoint`; ``train --resume`` reads it back with
    :func:`load_checkpoint` (``sft`` has no resume). The config it came from is the run's ``config.json``
    beside ``checkpoints/``, which eval and crossplay read.
    """

    step: int
    policies: dict[str, PolicyCheckpoint]
    """Policy name -> its record (``policies/NAME``)."""
    rae: RAEState = field(default_factory=RAEState)
    """The RAE baselines (``algorithm: rae``)."""
    curriculum: CurriculumState = field(default_factory=CurriculumState)
    """The curriculum's estimates (``curriculum.options``); a checkpoint from before it has none."""


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def save_checkpoint(run_dir: Path, checkpoint: Checkpoint, keep: int) -> Path:
    """Write ``checkpoint`` as ``run_dir/checkpoints/step_N``, atomically (temp dir, then rename), with torch's RNG.

    The newest ``keep`` checkpoints stay on disk, and only the newest keeps the optimisers' state.
    """
    root = run_dir / "checkpoints"
    step = checkpoint.step
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp_step_{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, part in checkpoint.policies.items():
        part.model.save_pretrained(tmp / "policies" / name)
        part.tokenizer.save_pretrained(tmp / "policies" / name)
        # plain data only, so that weights_only=True reads it back
        torch.save({"optimizer": None,
                    "pool": [[int(s), {k: v.cpu() for k, v in sd.items()}] for s, sd in part.pool],
                    "reference": None if part.reference is None else reference_state(part.reference),
                    "learner": None if part.learner is None else trained_state(part.learner),
                    "met": [[list(prompt), list(replies)] for prompt, replies in part.met.items()]},
                   tmp / f"{name}.trainer.pt")
        if part.optimizer is not None:
            torch.save(part.optimizer.state_dict(), tmp / f"{name}{OPTIMIZER}")
    state = {"step": step, "rae": checkpoint.rae.to_dict(), "curriculum": checkpoint.curriculum.to_dict(),
             "policies": sorted(checkpoint.policies),
             "torch_rng": torch.get_rng_state().tolist()}
    (tmp / "state.json").write_text(json.dumps(state))
    (tmp / MANIFEST).write_text(json.dumps(_manifest(tmp), indent=1))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_atomic(root / "latest", final.name)
    for old in sorted(p for p in root.glob("step_*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for old in root.glob("step_*"):
        if old.is_dir() and old != final:
            _drop_optimizer(old)
    return final


def reference_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Return the KL reference's weights to keep: all of them, or of a peft model its adapters (its base weights are
    the learner's, ``grpo.adapter_copy``)."""
    state = model.state_dict()
    if getattr(model, "peft_config", None) is None:
        return state
    return {k: v for k, v in state.items() if "lora_" in k}


def trained_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Return the weights the optimiser trains, by their ``state_dict`` names: all of them, or with LoRA the adapters."""
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    state = model.state_dict()
    return state if len(trained) == len(state) or not trained else {k: v for k, v in state.items() if k in trained}


def _drop_optimizer(path: Path) -> None:
    """Remove an older checkpoint's optimiser state (``--resume`` reads the newest only); the manifest first, so a
    crash in between leaves a file the manifest does not list, never a listed file missing."""
    files = sorted(path.glob(f"*{OPTIMIZER}"))
    if not files:
        return
    if (path / MANIFEST).exists():
        manifest = read_json(path / MANIFEST, "a checkpoint manifest (file -> bytes, sha256)")
        write_atomic(path / MANIFEST, json.dumps({k: v for k, v in manifest.items() if not k.endswith(OPTIMIZER)},
                                                 indent=1))
    for file in files:
        file.unlink(missing_ok=True)


def _manifest(path: Path) -> dict[str, dict[str, Any]]:
    """Return relative path -> {bytes, sha256} for every file under ``path``."""
    return {f.relative_to(path).as_posix(): {"bytes": f.stat().st_size, "sha256": _sha256(f)}
            for f in sorted(path.rglob("*")) if f.is_file() and f.name != MANIFEST}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename, so readers see old or new, never half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# Reading: every failure is a CheckpointError naming the file
# ---------------------------------------------------------------------------------------------


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 is no NaN token, but JSON's float reader makes it inf
        raise ValueError(f"{text[:40]} is not a finite number")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:  # json keeps the last silently: a reader would see one value, the loader another
            raise ValueError(f"the key {key!r:.60} appears twice in one object")
        out[key] = value
    return out


def read_json(path: Path, what: str = "JSON") -> Any:
    """Return the JSON in ``path``: strict UTF-8, finite numbers only, each key once per object; else a
    :class:`CheckpointError` naming it."""
    if Path(path).exists() and not Path(path).is_file():  # a FIFO would block, a device never end
        raise CheckpointError(f"{path}: not a regular file; expected {what}")
    try:
        text = Path(path).read_bytes().decode("utf-8")
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float,
                          object_pairs_hook=_unique_keys)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing; expected {what}") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"{path}: not valid {what} ({_reason(exc)}); the file is damaged or not what "
                              f"llm_zoo wrote there") from None


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}"


def verify_checkpoint(path: Path) -> None:
    """Check a checkpoint directory before anything loads it: every JSON file (and its run's ``config.json``),
    every safetensors header, then the manifest's sizes and hashes; raise :class:`CheckpointError` naming the
    first file that is wrong.

    A checkpoint written before manifests existed is checked without one.
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a checkpoint directory; expected runs/<run>/checkpoints/step_N")
    for entry in path.rglob("*"):  # a link or a FIFO could make a reader hash /dev/zero or wait forever
        if entry.is_symlink() or not (entry.is_file() or entry.is_dir()):
            raise CheckpointError(f"{entry}: a checkpoint holds plain files and folders only, not a symbolic link "
                                  f"or a device; copy the file in, or take another checkpoint")
    run_config = path.parent.parent / "config.json"  # the run's, which eval and crossplay read beside
    for file in [*sorted(path.rglob("*.json")), *([run_config] if path.parent.name == "checkpoints"
                                                   and run_config.exists() else [])]:
        read_json(file)
    if (path / "policies").is_dir():
        for policy in sorted(p for p in (path / "policies").iterdir() if p.is_dir()):
            _check_policy_dir(policy)
    for file in sorted(path.rglob("*.safetensors")):
        _read_weights(file, header_only=True)
    fix = "take an earlier checkpoint (checkpoints/step_N) or retrain"
    if (path / MANIFEST).exists():
        manifest = read_json(path / MANIFEST, "a checkpoint manifest (file -> bytes, sha256)")
        if not isinstance(manifest, dict):
            raise CheckpointError(f"{path / MANIFEST}: expected an object of file -> {{bytes, sha256}}; "
                                  f"got {type(manifest).__name__}")
        for name, entry in manifest.items():
            file = (path / name).resolve()
            if not file.is_relative_to(path.resolve()) or not isinstance(entry, dict):
                raise CheckpointError(f"{path / MANIFEST}: entry {name!r:.80} is not a file inside the checkpoint")
            if not file.is_file():
                raise CheckpointError(f"{path / name}: missing (the manifest lists it); {fix}")
            size = file.stat().st_size
            if size != entry.get("bytes"):
                raise CheckpointError(f"{path / name}: {size} bytes, expected {entry.get('bytes')!r} (truncated or "
                                      f"replaced); {fix}")
            if _sha256(file) != entry.get("sha256"):
                raise CheckpointError(f"{path / name}: its SHA-256 differs from the manifest's (corrupted); {fix}")


def _check_policy_dir(policy: Path) -> None:
    """Check what transformers and peft would read from a saved policy before they read it: no custom code
    (``auto_map``) in its JSON files, a model type transformers knows, and adapters over a base that is a
    model directory (or a hub name); else a :class:`CheckpointError` naming the file."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    for name in ("config.json", "tokenizer_config.json", "adapter_config.json", "generation_config.json"):
        file = policy / name
        if not file.is_file():
            continue
        data = read_json(file)
        if not isinstance(data, dict):
            raise CheckpointError(f"{file}: expected a JSON object; got {type(data).__name__}")
        if "auto_map" in data:
            raise CheckpointError(f"{file}: names custom code to load (auto_map), which llm_zoo never writes and "
                                  f"never runs; a checkpoint llm_zoo wrote has none: do not load this one")
        if name == "config.json" and not (isinstance(data.get("model_type"), str)
                                           and data["model_type"] in CONFIG_MAPPING_NAMES):
            raise CheckpointError(f"{file}: model_type must name a model transformers knows; got "
                                  f"{_describe(data.get('model_type'))}: the file is damaged or not a model's config")
        if name == "adapter_config.json":
            base = data.get("base_model_name_or_path")
            hub_name = isinstance(base, str) and base.count("/") == 1 and not base.startswith((".", "/", "~"))
            if not isinstance(base, str) or not (hub_name or (Path(base) / "config.json").is_file()):
                raise CheckpointError(f"{file}: base_model_name_or_path must name the base model's directory (one "
                                      f"holding config.json) or a hub name owner/name; got {_describe(base)}: set it "
                                      f"to where the base model is")


def _read_weights(file: Path, *, header_only: bool = False) -> dict[str, torch.Tensor]:
    from safetensors import safe_open
    from safetensors.torch import load_file

    try:
        if header_only:
            with safe_open(str(file), framework="pt") as f:
                f.keys()
            return {}
        return load_file(str(file))
    except FileNotFoundError:
        raise CheckpointError(f"{file}: missing; expected the policy's weights (safetensors)") from None
    except Exception as exc:  # safetensors raises its own error type for every kind of damage
        raise CheckpointError(f"{file}: not readable safetensors ({_reason(exc)}); the file is truncated or "
                              f"corrupted: take an earlier checkpoint (checkpoints/step_N) or retrain") from None


def _read_trainer_state(file: Path, what: str = "the learner's trainer state") -> dict[str, Any]:
    import pickle
    import zipfile

    try:
        state = torch.load(file, weights_only=True, map_location="cpu")
    except FileNotFoundError:
        if file.name.endswith(OPTIMIZER):
            raise CheckpointError(f"{file}: missing; only the newest checkpoint of a run keeps the optimiser's state "
                                  f"--resume reads (checkpoints/latest names it): resume from that one") from None
        raise CheckpointError(f"{file}: missing; expected {what}") from None
    except pickle.UnpicklingError as exc:  # what weights_only raises for any object but plain data
        # torch's text suggests weights_only=False; name only what was refused (its line naming a GLOBAL)
        first = next((line.split("error:", 1)[-1].strip() for line in str(exc).splitlines()
                      if "GLOBAL" in line or "global" in line), "an object that is not plain data")
        raise CheckpointError(f"{file}: refused: it holds more than plain data (tensors, numbers, strings, lists, "
                              f"dicts), which could run code when loaded ({first[:200]}); a checkpoint llm_zoo "
                              f"wrote never does: do not load this file") from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{file}: not readable as {what} ({_reason(exc)}); truncated or corrupted: "
                              f"take an earlier checkpoint (checkpoints/step_N) or retrain") from None
    if file.name.endswith(OPTIMIZER):
        _check_fields(file, state, {"state": dict, "param_groups": list})
        return state
    _check_fields(file, state, TRAINER_KEYS)
    for i, item in enumerate(state["pool"]):
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and type(item[0]) is int
                and _is_state_dict(item[1])):
            raise CheckpointError(f"{file}: pool[{i}] must be [step, state dict of name -> tensor]; got "
                                  f"{_describe(item)}")
    for key in ("learner", "reference"):
        if state[key] is not None and not _is_state_dict(state[key]):
            raise CheckpointError(f"{file}: {key} must be a state dict of name -> tensor (or None); got "
                                  f"{_describe(state[key])}")
    for i, item in enumerate(state["met"]):
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], (list, tuple))
                and isinstance(item[1], (list, tuple)) and all(type(t) is int for t in item[0])
                and all(isinstance(r, str) for r in item[1])):
            raise CheckpointError(f"{file}: met[{i}] must be [prompt token ids, legal replies]; got "
                                  f"{_describe(item)}")
    return state


def _is_state_dict(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())


def _describe(value: Any) -> str:
    """A short, safe description of a value read from a file: its type and a clipped repr."""
    try:
        shown = repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is described by its type alone
        shown = "?"
    return f"{type(value).__name__} {shown[:80]!r}"


def _check_fields(file: Path, data: Any, fields: Mapping[str, Any]) -> None:
    if not isinstance(data, dict):
        raise CheckpointError(f"{file}: expected an object with keys {sorted(fields)}; got {type(data).__name__}")
    missing = sorted(set(fields) - set(data))
    if missing:
        raise CheckpointError(f"{file}: missing keys {missing} (expected {sorted(fields)}); the file is damaged or "
                              f"from another version of llm_zoo: take another checkpoint or retrain")
    for key, kind in fields.items():
        if not isinstance(data[key], kind) or (kind is int and isinstance(data[key], bool)):
            raise CheckpointError(f"{file}: {key} must be {getattr(kind, '__name__', kind)}; "
                                  f"got {type(data[key]).__name__}: {data[key]!r:.80}")


def _read_state(path: Path) -> dict[str, Any]:
    file = path / "state.json"
    state = read_json(file, "a checkpoint's state (step, rae, policies, torch_rng)")
    _check_fields(file, state, STATE_KEYS)
    if state["step"] < 0:
        raise CheckpointError(f"{file}: step must be >= 0; got {state['step']}")
    rng = state["torch_rng"]
    size = torch.get_rng_state().numel()
    if len(rng) != size or not all(type(b) is int and 0 <= b <= 255 for b in rng):
        raise CheckpointError(f"{file}: torch_rng must be {size} bytes (ints 0-255), as torch.get_rng_state() "
                              f"gives; got {len(rng)} values")
    state.setdefault("curriculum", {})  # a checkpoint written before the curriculum
    for name in ("rae", "curriculum"):
        if not isinstance(state[name], dict) or not all(
                isinstance(k, str) and type(v) in (int, float) and math.isfinite(v) for k, v in state[name].items()):
            raise CheckpointError(f"{file}: {name} must map keys to finite numbers; got {state[name]!r:.120}")
    if not all(isinstance(p, str) for p in state["policies"]):
        raise CheckpointError(f"{file}: policies must be a list of names; got {state['policies']!r:.120}")
    return state


def _weights_file(policy: Path) -> Path:
    """The weights of a saved policy: the model's, or with LoRA the adapters' (``adapter_config.json`` beside)."""
    adapters = (policy / "adapter_config.json").is_file()
    return policy / ("adapter_model.safetensors" if adapters else "model.safetensors")


def _load_weights(file: Path, module: torch.nn.Module, weights: Mapping[str, torch.Tensor]) -> None:
    try:
        if file.name == "adapter_model.safetensors":  # peft's names, without the adapter's: peft maps them back
            from peft import set_peft_model_state_dict

            result = set_peft_model_state_dict(module, dict(weights))
        else:
            result = module.load_state_dict(weights, strict=False)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise CheckpointError(f"{file}: does not fit the model the config builds ({_reason(exc)}); resume with the "
                              f"run's own config (its config.yaml), or start a fresh run") from None
    if weights and len(result.unexpected_keys) == len(weights):
        raise CheckpointError(f"{file}: none of its {len(weights)} tensors is a parameter of the model the config "
                              f"builds (e.g. {result.unexpected_keys[0]!r:.80}); resume with the run's own config")


def load_checkpoint(path: Path, policies: Mapping[str, PolicyCheckpoint]) -> Checkpoint:
    """Read the checkpoint at ``path`` into ``policies``' modules and optimisers, in place, and restore torch's RNG.

    ``policies`` are records of the run's live policies, built from its config; the checkpoint's
    weights go into ``model`` (and ``learner``, ``reference`` where the record has them) and its
    optimiser state into ``optimizer``. Returns the checkpoint read: its step, RAE state, and per
    policy the same modules with the saved ``pool`` and ``met``.

    Raises:
        CheckpointError: A file is missing, truncated, corrupted, holds more than plain data, or
            does not fit the policies; the message names it. Nothing is restored until every file
            of the checkpoint has been read and checked.
    """
    path = Path(path)
    state = _read_state(path)  # the specific complaints first (a missing key, a damaged file), then the hashes
    if sorted(policies) != sorted(state["policies"]):
        raise CheckpointError(f"{path / 'state.json'}: the checkpoint holds policies {sorted(state['policies'])}, "
                              f"the config trains {sorted(policies)}; resume with the run's own config.policies")
    read = {}
    for name, part in policies.items():
        trainer_state = _read_trainer_state(path / f"{name}.trainer.pt")
        optimizer = trainer_state["optimizer"] or (  # older checkpoints kept it in NAME.trainer.pt
            None if part.optimizer is None else _read_trainer_state(path / f"{name}{OPTIMIZER}", "the optimiser's state"))
        read[name] = (_read_weights(_weights_file(path / "policies" / name)), trainer_state, optimizer)
    verify_checkpoint(path)
    restored = {}
    for name, part in policies.items():
        weights, trainer_state, optimizer_state = read[name]
        file = _weights_file(path / "policies" / name)
        trainer_file = path / f"{name}.trainer.pt"
        _load_weights(file, part.model, weights)
        if part.learner is not None:  # policies/ holds the average; the trained weights are kept apart
            if trainer_state["learner"]:
                _load_weights(trainer_file, part.learner, trainer_state["learner"])
            else:
                _load_weights(file, part.learner, weights)
        if part.optimizer is not None:
            try:
                part.optimizer.load_state_dict(optimizer_state)
            except (KeyError, ValueError, RuntimeError, TypeError) as exc:
                raise CheckpointError(f"{trainer_file}: its optimizer state does not fit the learner "
                                      f"({_reason(exc)}); resume with the run's own config") from None
        if part.reference is not None and trainer_state["reference"] is not None:
            _load_weights(trainer_file, part.reference, trainer_state["reference"])
        restored[name] = dataclasses.replace(
            part, pool=[(s, sd) for s, sd in trainer_state["pool"]],
            met={tuple(prompt): tuple(replies) for prompt, replies in trainer_state["met"]})
    torch.set_rng_state(torch.tensor(state["torch_rng"], dtype=torch.uint8))
    return Checkpoint(state["step"], restored, RAEState.from_dict(state["rae"]),
                      CurriculumState.from_dict(state["curriculum"]))


# ---------------------------------------------------------------------------------------------
# Finding runs
# ---------------------------------------------------------------------------------------------


def latest_checkpoint(run_dir: Path) -> Path | None:
    """Return the newest complete checkpoint of a run, or None.

    ``checkpoints/latest`` must name a ``step_N`` directory beside it: a pointer elsewhere
    (``../..``, an absolute path) is refused with :class:`CheckpointError`.
    """
    pointer = run_dir / "checkpoints" / "latest"
    if pointer.exists() or pointer.is_symlink():
        if pointer.is_symlink() or not pointer.is_file():
            raise CheckpointError(f"{pointer}: must be a plain file naming a step_N directory beside it, not a "
                                  f"symbolic link or a device")
        try:
            with open(pointer, "rb") as f:
                name = f.read(64).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"{pointer}: not readable ({_reason(exc)}); expected the name of a step_N "
                                  f"directory beside it") from None
        if not (name.startswith("step_") and name[5:].isdigit() and name.isascii()):
            raise CheckpointError(f"{pointer}: expected the name of a step_N directory beside it; got {name!r:.80}")
        path = run_dir / "checkpoints" / name
        if (path / "state.json").exists():
            return path
    return None


def latest_run(env: str, root: Path = Path("runs")) -> Path | None:
    """Return the newest run of ``env`` under ``root`` (``runs/<env>-<time>``) that holds a complete checkpoint."""
    if not root.is_dir():
        return None
    runs = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(f"{env}-") and _has_checkpoint(p)]
    # the names end in the start time (YYYYmmdd-HHMMSS), so they sort by it; mtime breaks ties
    return max(runs, key=lambda p: (p.name, p.stat().st_mtime), default=None)


def _has_checkpoint(run_dir: Path) -> bool:
    """Whether a run holds a complete checkpoint; one whose ``latest`` pointer is damaged holds none."""
    try:
        return latest_checkpoint(run_dir) is not None
    except CheckpointError:
        return False


def init_checkpoint(path: str | Path, names: Sequence[str]) -> dict[str, Path]:
    """Return policy name -> its directory in a checkpoint, or in a run directory's latest one (``train``'s ``init``).

    A checkpoint of one policy whose name no learner has starts every learner from it: one warm start (``llm-zoo sft``
    fits one policy) for a learner per seat.

    Raises:
        FileNotFoundError: ``path`` is neither a checkpoint (``policies/`` inside) nor a run with one.
        CheckpointError: A file of the checkpoint is damaged (:func:`verify_checkpoint`), before anything loads it.
        ValueError: The checkpoint has no policy of one of ``names`` (the message lists those it has).
    """
    path = Path(path)
    ckpt = path if (path / "policies").is_dir() else latest_checkpoint(path)
    if ckpt is None:
        raise FileNotFoundError(f"config.init: {path} is neither a checkpoint directory (with policies/ inside) nor "
                                f"a run directory holding checkpoints/latest; give a run of `llm-zoo sft` or "
                                f"`llm-zoo train`, or one of its checkpoints/step_N")
    verify_checkpoint(ckpt)
    have = sorted(p.name for p in (ckpt / "policies").iterdir() if p.is_dir())
    if len(have) == 1 and not set(names) & set(have):
        # one fitted policy and learners of other names (one per seat, say): each starts from that warm start
        return {n: ckpt / "policies" / have[0] for n in names}
    missing = [n for n in names if n not in have]
    if missing:
        raise ValueError(f"config.init: {ckpt} has no policy named {missing} (it has {have}); the learners are "
                         f"{sorted(names)}: fit that policy (llm-zoo sft ENV --role ROLE, whose checkpoint names it "
                         f"policies.get(ROLE, 'main')) or map the roles to {have} with config.policies")
    return {n: ckpt / "policies" / n for n in names}


def resume_dir(env: str, run_dir: str, root: Path = Path("runs")) -> Path:
    """Return the run directory ``--resume`` continues: ``run_dir``, or the newest run of ``env`` under ``root``.

    Raises:
        FileNotFoundError: There is nothing to resume (the message says how to name a run, or to
            start afresh); a resume never silently becomes a fresh run.
    """
    if run_dir:
        path = Path(run_dir)
        if latest_checkpoint(path) is None:
            raise FileNotFoundError(f"--resume: {path} holds no complete checkpoint (expected "
                                    f"{path}/checkpoints/latest naming a step_N directory); drop --resume to "
                                    f"start a fresh run there")
        return path
    path = latest_run(env, root)
    if path is None:
        raise FileNotFoundError(f"--resume: no run of {env} with a checkpoint under {root}/ (expected "
                                f"{root}/{env}-<time>/checkpoints/); name the run to resume with --run-dir "
                                f"DIR (--set run_dir=DIR), or drop --resume to start a fresh one")
    return path


# ---------------------------------------------------------------------------------------------
# Owning a run directory
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def own_run_dir(run_dir: Path, *, resume: bool = False, overwrite: bool = False,
                resumable: bool = True) -> Iterator[Path]:
    """Hold ``run_dir`` for one run: an exclusive lock on ``run_dir/run.lock`` for the block's length.

    A fresh run (neither ``resume`` nor ``overwrite``) is refused where a run already wrote (any
    of :data:`RUN_ENTRIES` but its config, which a run refused before its first step leaves); with
    ``overwrite`` those entries are removed first (nothing else in the directory is touched). The lock is ``fcntl.flock`` on an open file: the kernel releases it
    when the file closes or the process ends, however it ends, so a crash never leaves it held.
    ``resumable`` says whether the refusal may point to ``--resume`` (``llm-zoo sft`` has none).

    Raises:
        CheckpointError: Another process holds the lock (the message names its pid, host, start
            time and command), or the directory holds a run and neither flag was given.
    """
    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file of that name, a folder it may not write
        raise CheckpointError(f"{run_dir}: cannot be a run directory ({_reason(exc)}); pick another --run-dir "
                              f"(--set run_dir=DIR)") from None
    lock = run_dir / LOCK
    try:  # O_NOFOLLOW: a planted symlink must not make the holder's note overwrite another file
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CheckpointError(f"{lock}: is a symbolic link; a run's lock file must be a plain file: remove "
                                  f"it (or pick another --run-dir)") from None
        raise CheckpointError(f"{lock}: cannot open the run's lock file ({_reason(exc)}); pick another --run-dir "
                              f"(--set run_dir=DIR)") from None
    with os.fdopen(fd, "r+", encoding="utf-8", errors="replace") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = " ".join(handle.read(2000).split()) or "a process that has not written its note yet"
            raise CheckpointError(f"{run_dir}: another run is writing there (its lock {lock} is held by {holder}); "
                                  f"wait for it to end, or give this run another --run-dir") from None
        here = sorted(e for e in RUN_ENTRIES if (run_dir / e).exists() or (run_dir / e).is_symlink())
        # a run refused before its first step (a bad init, say) left only its config: nothing to lose there
        if set(here) - {"config.json", "config.yaml"} and not (resume or overwrite):
            resuming = "continue it with --resume, " if resumable else ""  # sft has no --resume
            raise CheckpointError(f"{run_dir}: already holds a run ({', '.join(here)}); {resuming}start afresh over "
                                  f"it with --overwrite (its files are removed), or give another --run-dir")
        if overwrite and not resume:
            for entry in here:
                target = run_dir / entry
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                else:
                    target.unlink()
        note = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "command": " ".join(sys.argv)[:300]}
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(note))
        handle.flush()
        yield run_dir
