"""bench/bench_sampler.py: a table of the sampler's ms per step, one row per case."""

from __future__ import annotations

import pytest

from tests.bench.scripts import load_script

pytest.importorskip("torch")


def test_the_table_has_a_row_per_case_and_a_column_per_batch(capsys):
    bench = load_script("bench_sampler")
    assert bench.main(["--device", "cpu", "--rows", "1,3", "--vocab", "64", "--steps", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "sampling ms per step, cpu, vocab 64"
    assert lines[1] == "| case | 1 rows | 3 rows |"
    rows = [line.split(" | ")[0].lstrip("| ") for line in lines[3:]]
    assert rows == list(bench.CASES)
    assert all(float(cell) >= 0 for line in lines[3:] for cell in line.strip("| ").split(" | ")[1:])
