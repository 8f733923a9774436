"""Pretrained Kuhn poker: SmolLM2-135M-Instruct's exact exploitability zero-shot, after a warm start on the Nash
player's traces and after self-play from it (a model per seat, LoRA adapters of each seat's own), read by the tiny
model's evaluator.

The rows of ``python -m benchmarks.learning --envs kuhn_poker_v0 --model smollm2-135m``
(:data:`benchmarks.learning.MODEL_ENVS`): the exploitability masked to legal moves, the exploitability of the
unmasked strategy and the unmasked mass of the legal replies, each read exactly at the 12 information sets (no
episodes sampled); ``self-play`` from the warm start's adapters and ``anchored`` (the warm start merged into the
weights, fresh adapters, an exact KL term to it); 3 training seeds, the cost of each stage beside it. One seed took
30 minutes alone on 2 CPU cores (36 with other jobs beside its warm start), so ``llm-zoo bench`` runs it only when
named: ``llm-zoo bench --only pretrained_kuhn``.
"""
# bench-opt-in: 3 seeds of a 135M model take about 1.5-2 hours on 2 CPU cores (30-36 min a seed)

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from benchmarks import _harness as harness
from benchmarks.learning import pretrained_rows


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = harness.parser(__doc__, quick="1 seed, 8 trace episodes for 1 epoch, 1 step of 4 episodes: about 7 min")
    harness.add_out(parser, "folder for the runs and pretrained.png (default: a temporary one)")
    return harness.emit(pretrained_rows("kuhn_poker_v0", parser, argv))


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
