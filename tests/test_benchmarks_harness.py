"""benchmarks/_harness.py: the options, table and JSON line every benchmark shares, and that every one uses them."""

from __future__ import annotations

import argparse
import ast
import json

import pytest

from benchmarks import _harness as harness
from llm_zoo import bench


def test_the_parser_takes_the_docstrings_first_paragraph_and_quick():
    parser = harness.parser("Speed of a thing:\nmeasured twice.\n\nMore words that stay out.", quick="one round")
    assert parser.description == "Speed of a thing: measured twice."
    assert parser.parse_args([]).quick is False and parser.parse_args(["--quick"]).quick is True
    assert "one round" in parser.format_help()


@pytest.mark.parametrize("text", ["0", "-3", "1.5", "x", ""])
def test_a_count_below_one_or_not_whole_is_refused_with_what_was_expected(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"expected a whole number >= 1, got "):
        harness.count(text)


@pytest.mark.parametrize("text", ["0", "-0.5", "nan", "x"])
def test_a_positive_number_refuses_zero_negatives_nan_and_words(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"expected a number > 0, got "):
        harness.positive(text)


def test_the_common_options_parse_and_refuse_bad_values(capsys):
    parser = harness.parser(None, quick="q")
    harness.add_out(parser, "where the tables go")
    harness.add_runs_dir(parser, "shared runs")
    harness.add_seeds(parser, default=3, help="seeds")
    harness.add_workers(parser, default=None, help="workers")
    args = parser.parse_args(["--out", "o", "--runs-dir", "r", "--seeds", "2", "--workers", "4"])
    assert (args.out, args.runs_dir, args.seeds, args.workers) == ("o", "r", 2, 4)
    assert harness.count("7") == 7 and harness.positive("0.25") == 0.25
    assert parser.parse_args([]).seeds == 3 and parser.parse_args([]).workers is None
    for bad in (["--seeds", "0"], ["--workers", "-1"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
    assert "expected a whole number >= 1" in capsys.readouterr().err


def test_the_table_pads_each_column_to_one_width_and_refuses_ragged_rows():
    text = harness.table(["system", "value"], [["cfr", 0.5], ["a longer name", "1"]])
    assert text.splitlines() == ["| system        | value |",
                                 "|---------------|-------|",
                                 "| cfr           | 0.5   |",
                                 "| a longer name | 1     |"]
    with pytest.raises(ValueError, match="every row needs 2 cells"):
        harness.table(["a", "b"], [["only one"]])


def test_emit_prints_one_json_line_and_returns_it(capsys):
    figures = {"x": 1.5, "rows": {"a": [1, 2]}, "seconds": 0.1}
    assert harness.emit(figures) == figures
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == figures
    assert harness.skipped("gpu_x", "no CUDA GPU") == {"skipped": "no CUDA GPU"}
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "gpu_x: skipped, no CUDA GPU." and json.loads(out[-1]) == {"skipped": "no CUDA GPU"}


def _calls(tree: ast.AST) -> set[str]:
    return {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}


@pytest.mark.parametrize("name", list(bench.discover()))
def test_every_benchmark_parses_and_prints_through_the_harness(name):
    """No benchmark builds its own parser or prints its own JSON line: both go through the harness, so that each
    has --quick and ends with one JSON object."""
    tree = ast.parse(bench.discover()[name].read_text())
    calls = _calls(tree)
    assert "harness.parser" in calls and ("harness.emit" in calls or "harness.skipped" in calls), name
    assert "argparse.ArgumentParser" not in calls, f"{name} builds its own parser; use harness.parser"
    printed = [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.Call)
               and ast.unparse(node.func) == "print" and any("json.dumps" in ast.unparse(a) for a in node.args)]
    assert printed == [], f"{name} prints JSON itself ({printed}); end with harness.emit"


def test_the_checkouts_benchmarks_run_as_modules_and_other_folders_as_files(tmp_path):
    script = bench.discover()["env_throughput"]
    assert bench._launch(script) == ["-m", "benchmarks.env_throughput"]
    loose = tmp_path / "loose.py"
    loose.write_text("print(1)\n")
    assert bench._launch(loose) == [str(loose)]
