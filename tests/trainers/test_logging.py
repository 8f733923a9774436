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


@pytest.mark.parametrize("damage", [b"\xff\xfe not utf-8\n", b"[1, 2]\n", b"[" * 100_000 + b"\n", b'{"no_step": 1}\n'])
def test_a_damaged_metrics_file_is_refused_naming_it(tmp_path, damage):
    from llm_zoo.trainers.logging import MetricsFormatError, MetricsLogger, read_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(damage + b'{"step": 1, "x": 0.5}\n')
    with pytest.raises(MetricsFormatError, match="metrics.jsonl"):
        read_metrics(tmp_path)
    if damage.startswith(b"\xff"):  # resuming over it says the same, never a bare UnicodeDecodeError
        with pytest.raises(MetricsFormatError, match="not UTF-8"):
            MetricsLogger(tmp_path, resume_from=1, tensorboard=False)
