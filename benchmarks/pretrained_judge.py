"""Pretrained solver on agentic_judge: SmolLM2-135M-Instruct zero-shot, warm-started on stored solutions, and trained
by RL on the rule judge's score against the same run on the visible tests' pass rate, scored by the hidden tests.

The rows of ``python -m benchmarks.learning --envs agentic_judge_v0 --model smollm2-135m``
(:data:`benchmarks.learning.MODEL_ENVS`): the hidden-test pass rate with its pooled Wilson interval, on the tasks
with brittle visible tests and on those with weak ones apart, and the share the rule judge passed, beside the floor
(a stored wrong solution every time); 3 training seeds, the cost of each stage beside it. A seed takes about 48
minutes on 2 CPU cores (the rows read once 5 more), so ``llm-zoo bench`` runs it only when named: ``llm-zoo bench
--only pretrained_judge``.
"""
# bench-opt-in: 3 seeds of a 135M model take about 2.2 hours on 2 CPU cores (two seeds 88 min)

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from benchmarks import _harness as harness
from benchmarks.learning import pretrained_rows


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = harness.parser(__doc__, quick="1 seed, 3 tasks, 3 trace episodes, 1 step of 2 episodes: about 10 min")
    harness.add_out(parser, "folder for the runs and pretrained.png (default: a temporary one)")
    return harness.emit(pretrained_rows("agentic_judge_v0", parser, argv))


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
