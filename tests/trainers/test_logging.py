"""The run's progress bar keeps transformers' own bars off while it is open, and gives them back."""

from __future__ import annotations

import io

import pytest
from transformers.utils import logging as hf_logging

from llm_zoo.trainers.logging import progress_bar


@pytest.fixture(autouse=True)
def _bars_on():
    hf_logging.enable_progress_bar()
    yield
    hf_logging.enable_progress_bar()


def test_library_bars_are_quiet_while_the_run_bar_is_open(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    bar = progress_bar(total=3, initial=0, desc="train x")
    assert not hf_logging.is_progress_bar_enabled()
    for _ in hf_logging.tqdm(range(2), desc="Writing model shards"):  # what save_pretrained draws
        bar.update(1)
    bar.close()
    assert hf_logging.is_progress_bar_enabled()
    assert "Writing model shards" not in err.getvalue() and "train x" in err.getvalue()


def test_bars_turned_off_before_stay_off():
    hf_logging.disable_progress_bar()
    bar = progress_bar(total=1, initial=0, desc="train x")
    bar.close()
    assert not hf_logging.is_progress_bar_enabled()
