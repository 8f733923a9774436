"""Pretrained user_sim: SmolLM2-135M-Instruct as the shop's assistant, zero-shot, warm-started on the held-in
templates' traces and after RL against the frozen scripted user (user_sim_v0's main job), scored on held-out seeds.

The rows of ``python -m benchmarks.learning --envs user_sim_v0 --model smollm2-135m``
(:data:`benchmarks.learning.MODEL_ENVS`): the success rate on 2 evaluation seeds of every template (24 episodes) with
its pooled Wilson interval, the held-in and held-out templates apart, against the scripted user and against the
paraphrasing one, whose words no trace holds; 3 training seeds, the cost of each stage beside it. A seed (the main
job and its evaluations) took 35-40 minutes on 2 CPU cores, 3 seeds 112 minutes, so ``llm-zoo bench`` runs it only
when named:
``llm-zoo bench --only pretrained_user_sim``.
"""
# bench-opt-in: 3 seeds of a 135M model's main job and its evaluations take hours on 2 CPU cores

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from benchmarks import _harness as harness
from benchmarks.learning import pretrained_rows


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = harness.parser(__doc__, quick="1 seed, 2 trace episodes, 1 step of 2 episodes on 3 templates: a few minutes")
    harness.add_out(parser, "folder for the runs and pretrained.png (default: a temporary one)")
    return harness.emit(pretrained_rows("user_sim_v0", parser, argv))


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
