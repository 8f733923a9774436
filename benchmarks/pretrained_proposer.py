"""Pretrained proposer: SmolLM2-135M-Instruct writes tasks for proposer_solver_v0's solvers, zero-shot, warm-started
and after RL (hgrpo), against the proposers of fixed difficulty, scored by learnability on held-out topics.

The rows of ``python -m benchmarks.learning --envs proposer_solver_v0 --model smollm2-135m``
(:data:`benchmarks.learning.MODEL_ENVS`): each policy's mean learnability 4p(1-p) of 32 tasks on the 10 held-out
topics against the frozen panel of scripted solvers, with the share of invalid tasks and the panel's mean pass rate;
3 training seeds, the cost of each stage beside it. With the present presets (32 RL steps, adapters in the top 15
blocks, no checkpointing; a warm start of one task a step) a seed takes 27-29 minutes on 2 CPU cores, its warm start,
RL (18-19.5 minutes) and their evaluations (83.5 minutes for 3 seeds), and the zero-shot and fixed-difficulty rows,
read once, about 10 more, so ``llm-zoo bench`` runs it only when named: ``llm-zoo bench --only pretrained_proposer``.
"""
# bench-opt-in: 3 seeds of a 135M model take over an hour on 2 CPU cores

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from benchmarks import _harness as harness
from benchmarks.learning import pretrained_rows


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = harness.parser(__doc__, quick="1 seed, 4 trace episodes, 1 step of 2 episodes: about 10 min")
    harness.add_out(parser, "folder for the runs and pretrained.png (default: a temporary one)")
    return harness.emit(pretrained_rows("proposer_solver_v0", parser, argv))


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
