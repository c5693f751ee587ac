"""README.md's "Using it" program runs as written, against parrot-serve on simulated engines."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.serve_process import SIM_ENGINE, parrot_serve

ROOT = Path(__file__).resolve().parents[1]


def readme_program() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Using it"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "no Python block under 'Using it'"
    return match.group(1)


def test_the_using_it_program_runs_as_written(tmp_path):
    program = readme_program()
    assert "asyncio.run(" in program   # a whole program, not a fragment
    compile(program, "README.md", "exec")
    config = {"policy": {"name": "app_centric"}, "engines": [{"name": "sim-0", **SIM_ENGINE}]}
    with parrot_serve(config, tmp_path) as (url, _):
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path,
                              env={**os.environ, "PARROT_URL": url,
                                   "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == ""   # no warnings (e.g. an unclosed client session)
    # the simulated engine writes max_tokens (64) 4-character words: the last summary
    assert len(done.stdout.strip()) == 64 * 4 - 1
