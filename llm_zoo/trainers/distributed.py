"""Data-parallel training under ``torchrun``: the process group, the episode split, the gradient all-reduce.

``torchrun --standalone --nproc-per-node N -m llm_zoo train ENV ...`` starts N copies of the trainer
with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous address in their environment;
:func:`setup` joins them into one ``torch.distributed`` process group (gloo on CPU, nccl on GPU,
each rank on its own ``cuda:LOCAL_RANK``). Without those variables (a plain ``llm-zoo train``) every
function here is the identity of one process, so a single-process run does exactly what it did.

How a step splits (what :func:`llm_zoo.trainers.grpo.train` calls):

- ROLLOUT: every rank draws the step's whole seed list and assignments from the same
  ``(seed, step)`` RNG, then plays only its slice of the episodes (:func:`episode_slice`: whole
  groups of ``group_size``, contiguous, so no group is cut across ranks), and
  :func:`gather` hands every rank the whole batch in the single-process order. So baselines,
  groups and advantages are computed from the whole batch, the same on every rank and the same
  as one process would compute from those episodes, and the RAE state stays identical.
- UPDATE: each rank scores a contiguous share of each learner's samples (:func:`shard`); the loss
  normaliser is the whole batch's (``AGGREGATIONS[...].normalizer`` of all samples), so summing the
  ranks' gradients (:func:`reduce_gradients`, an all-reduce) gives exactly the gradient of the
  whole batch's loss; clipping and the optimiser step (AdamW or SGD) then run on identical gradients on every rank,
  and the replicas stay equal (what DDP does, done once per step after the micro-batches, which
  may number differently on each rank). The step's stats are summed the same way
  (:func:`sum_stats`).
- Rank 0 alone writes the run directory (config, metrics, samples, checkpoints, eval.json) and
  shows the progress bar; the others wait for its checkpoint at a barrier. A resumed run loads the
  checkpoint on every rank.

Each rank's policies sample with their own seed (:func:`rollout_seed`; rank 0 keeps the
single-process one), so ranks do not draw the same random replies for their different episodes.
The model is replicated on every rank: a model that does not fit one device needs FSDP2's
``fully_shard``, which this module does not apply (docs/scaling.md).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist

__all__ = ["NullLogger", "barrier", "broadcast", "device", "episode_slice", "gather", "is_main", "launched", "rank",
           "rank_name", "reduce_gradients", "rollout_seed", "setup", "shard", "sum_stats", "teardown", "world_size"]

T = TypeVar("T")


def world_size() -> int:
    """The number of ranks (1 without a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank (0 without a process group)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_main() -> bool:
    """True on the rank that writes the run directory, logs and shows progress (rank 0)."""
    return rank() == 0


def launched() -> bool:
    """True when this process was started by torchrun (or another launcher) as one of several ranks."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


GROUP_TIMEOUT_S = 3600
"""How long a collective waits for every rank (the process group's timeout): an hour, enough for rank 0's warm start."""


def setup(device: str = "auto") -> bool:
    """Join the process group torchrun describes, when it describes one; return True if this call created it.

    The backend is nccl when the ranks train on CUDA (``device`` auto with a GPU, or cuda), else
    gloo; each CUDA rank takes ``cuda:LOCAL_RANK``. Idempotent: an existing group is kept.
    """
    if not launched() or (dist.is_available() and dist.is_initialized()):
        return False
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 (a torchrun launch), but this torch build has no torch.distributed; "
                           "install a torch with distributed support or run one process")
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    # A collective waits this long for the slowest rank: rank 0 alone runs a warm start (init: sft)
    # while the others wait at its broadcast, which takes minutes (torch's default: 10 min on nccl).
    dist.init_process_group(backend="nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S))
    return True


def teardown(created: bool) -> None:
    """Leave the process group if :func:`setup` created it."""
    if created and dist.is_initialized():
        dist.destroy_process_group()


def device(choice: str) -> torch.device:
    """Return the torch device of this rank for ``config.device`` (auto, cpu, cuda): cuda:LOCAL_RANK under torchrun."""
    if choice not in ("auto", "cuda"):  # cpu, or a device named outright (cuda:1)
        return torch.device(choice)
    if choice == "auto" and not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if world_size() > 1 else "cuda")


def barrier() -> None:
    """Wait for every rank (no-op in one process)."""
    if world_size() > 1:
        dist.barrier()


def broadcast(obj: T) -> T:
    """Return rank 0's ``obj`` on every rank (a picklable object; the identity in one process)."""
    if world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def episode_slice(n_episodes: int, group_size: int) -> slice:
    """Return the episodes this rank plays: a contiguous run of whole groups of ``group_size``.

    Groups are dealt as evenly as they go (the first ranks get one more when they do not divide);
    the slices of ranks 0..N-1, in order, cover ``range(n_episodes)`` once.
    """
    n_groups = n_episodes // group_size
    size, r = world_size(), rank()
    lo = r * n_groups // size
    hi = (r + 1) * n_groups // size
    return slice(lo * group_size, hi * group_size)


def rollout_seed(seed: int) -> int:
    """Return the policies' sampling seed of this rank for a step whose single-process seed is ``seed``."""
    r = rank()
    if r == 0:
        return seed
    import numpy as np

    return int(np.random.SeedSequence([seed, r]).generate_state(1)[0]) & 0x7FFFFFFF


def gather(items: Sequence[T]) -> list[T]:
    """Return every rank's ``items`` concatenated in rank order (picklable items; a copy of the list in one process)."""
    if world_size() == 1:
        return list(items)
    parts: list[Any] = [None] * world_size()
    dist.all_gather_object(parts, list(items))
    return [item for part in parts for item in part]


def shard(batch: Sequence[T]) -> Sequence[T]:
    """Return this rank's contiguous share of ``batch`` (the whole batch in one process)."""
    size, r = world_size(), rank()
    if size == 1:
        return batch
    n = len(batch)
    return batch[r * n // size:(r + 1) * n // size]


def reduce_gradients(model: torch.nn.Module) -> None:
    """Sum every trainable parameter's gradient over the ranks, in place (one all-reduce of a flat buffer).

    A parameter with no gradient on this rank (it scored no sample) contributes zeros, so every
    rank ends with the same gradient: the one of the whole batch's loss when each rank's loss was
    divided by the whole batch's normaliser.
    """
    if world_size() == 1:
        return
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p in params:
        n = p.grad.numel()
        p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
        offset += n


def rank_name(name: str) -> str:
    """Return ``name`` in one process, ``name.rankR`` under torchrun: a path each rank writes alone."""
    return name if world_size() == 1 else f"{name}.rank{rank()}"


class NullLogger:
    """What ranks other than 0 log to: nothing (rank 0's MetricsLogger writes the run's rows)."""

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Drop the row."""

    def close(self) -> None:
        """Nothing to close."""


def sum_stats(stats: dict[str, float]) -> dict[str, float]:
    """Return the key-wise sum of every rank's ``stats`` (``stats`` itself in one process)."""
    if world_size() == 1:
        return stats
    parts: list[Any] = [None] * world_size()
    dist.all_gather_object(parts, dict(stats))
    out: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, 0.0) + float(value)
    return out
