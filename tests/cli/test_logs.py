"""--log-level is validated: a bad level is one line on stderr and exit status 2."""

from __future__ import annotations

import pytest

from parrot.cli import engine, serve
from parrot.cli.logs import configure_logging

ROOT_CONFIG = "configs/sim.yaml"


def test_bogus_level_is_one_line_not_a_traceback(capsys):
    assert serve.main(["--config", ROOT_CONFIG, "--log-level", "bogus"]) == 2
    err = capsys.readouterr().err
    assert err == ("parrot-serve: --log-level 'bogus' is not one of DEBUG, INFO, WARNING, "
                   "ERROR, CRITICAL\n")
    with pytest.raises(SystemExit) as exit_:
        engine.main(["--kind", "simulated", "--name", "e", "--log-level", "loud"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_levels_are_case_insensitive():
    assert configure_logging("x", "debug") and configure_logging("x", "Warning")
