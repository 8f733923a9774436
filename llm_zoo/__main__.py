"""``python -m llm_zoo`` is the ``llm-zoo`` command (what ``torchrun -m llm_zoo`` launches)."""

from __future__ import annotations

import sys

from llm_zoo.cli import main

if __name__ == "__main__":
    sys.exit(main())
