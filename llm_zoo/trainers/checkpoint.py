"""Checkpoints: everything a run needs to resume exactly, written atomically, and finding them again.

A checkpoint is a directory ``runs/<run>/checkpoints/step_NNNNNN`` holding, per learner, the
policy it delivers under ``policies/NAME`` (``save_pretrained`` format: what ``llm-zoo eval`` and
``crossplay`` load) and ``NAME.trainer.pt`` (optimiser, self-play pool, reference model, and the
learner's own weights when ``policies/`` holds their average), plus ``state.json`` (the step, the
RAE baselines, torch's RNG). It is written to a temporary directory and renamed into place, then
``checkpoints/latest`` is rewritten the same way, so a run killed at any instant leaves either
the old checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from llm_zoo.trainers.advantages import RAEState

__all__ = ["latest_checkpoint", "latest_run", "load_checkpoint", "resume_dir", "save_checkpoint", "write_atomic"]


def save_checkpoint(run_dir: Path, step: int, learners: Mapping[str, Any], rae_state: RAEState, keep: int) -> Path:
    """Write everything needed to resume after ``step`` steps, atomically (temp dir, then rename).

    ``learners`` maps names to :class:`llm_zoo.trainers.grpo.Learner`; the newest ``keep``
    checkpoints stay on disk.
    """
    root = run_dir / "checkpoints"
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp_step_{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, learner in learners.items():
        learner.trained.model.save_pretrained(tmp / "policies" / name)
        learner.policy.tokenizer.save_pretrained(tmp / "policies" / name)
        torch.save({"optimizer": learner.optimizer.state_dict(),
                    "pool": [(s, {k: v.cpu() for k, v in sd.items()}) for s, sd in learner.pool],
                    "reference": None if learner.reference is None else learner.reference.state_dict(),
                    "learner": None if learner.average is None else learner.model.state_dict(),
                    "met": [[list(prompt), list(replies)] for prompt, replies in learner.met.items()]},
                   tmp / f"{name}.trainer.pt")
    state = {"step": step, "rae": rae_state.to_dict(), "policies": sorted(learners),
             "torch_rng": torch.get_rng_state().tolist()}
    (tmp / "state.json").write_text(json.dumps(state))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_atomic(root / "latest", final.name)
    for old in sorted(p for p in root.glob("step_*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path, learners: Mapping[str, Any]) -> tuple[int, RAEState]:
    """Restore learners in place from a checkpoint; return (the step to continue from, the RAE state)."""
    from safetensors.torch import load_file

    state = json.loads((path / "state.json").read_text())
    for name, learner in learners.items():
        weights = load_file(str(path / "policies" / name / "model.safetensors"))
        trainer_state = torch.load(path / f"{name}.trainer.pt", weights_only=False)
        if learner.average is not None:  # policies/ holds the average; the learner's weights are kept apart
            learner.average.model.load_state_dict(weights, strict=False)
            weights = trainer_state.get("learner") or weights
        learner.model.load_state_dict(weights, strict=False)
        learner.optimizer.load_state_dict(trainer_state["optimizer"])
        learner.pool = [(s, sd) for s, sd in trainer_state["pool"]]
        learner.met = {tuple(prompt): tuple(replies) for prompt, replies in trainer_state.get("met", [])}
        if learner.reference is not None and trainer_state.get("reference") is not None:
            learner.reference.load_state_dict(trainer_state["reference"])
    torch.set_rng_state(torch.tensor(state["torch_rng"], dtype=torch.uint8))
    return int(state["step"]), RAEState.from_dict(state["rae"])


def latest_checkpoint(run_dir: Path) -> Path | None:
    """Return the newest complete checkpoint of a run, or None."""
    pointer = run_dir / "checkpoints" / "latest"
    if pointer.exists():
        path = run_dir / "checkpoints" / pointer.read_text().strip()
        if (path / "state.json").exists():
            return path
    return None


def latest_run(env: str, root: Path = Path("runs")) -> Path | None:
    """Return the newest run of ``env`` under ``root`` (``runs/<env>-<time>``) that holds a complete checkpoint."""
    if not root.is_dir():
        return None
    runs = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(f"{env}-") and latest_checkpoint(p)]
    # the names end in the start time (YYYYmmdd-HHMMSS), so they sort by it; mtime breaks ties
    return max(runs, key=lambda p: (p.name, p.stat().st_mtime), default=None)


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


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename, so readers see old or new, never half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
