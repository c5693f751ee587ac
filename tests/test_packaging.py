"""The package as installed (not the source tree): package data, version, entry points.

The full check (a fresh venv with dependencies from the index, parrot-serve from the wheel)
is scripts/check_install.py; this test installs without dependencies (offline) into a target
folder and runs from outside the source tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import parrot
from parrot.cli.main import main as parrot_main

ROOT = Path(__file__).resolve().parents[1]


def test_version_is_one_value(capsys):
    assert parrot_main(["--version"]) == 0
    assert capsys.readouterr().out == f"parrot-serve {parrot.__version__}\n"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["dynamic"] == ["version"] and project["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert "openai" in " ".join(project["optional-dependencies"]["test"])


@pytest.mark.slow
def test_installed_package_finds_its_profiles_outside_the_source_tree(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": str(target)}
    where = subprocess.run([sys.executable, "-c", "import parrot; print(parrot.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(target))
    assert (target / "parrot/configs/profiles/a100_llama13b.yaml").is_file()
    # policies.yaml ships (a copy, not the checkout's link): parrot-serve needs no --config
    shipped = target / "parrot/configs/policies.yaml"
    assert shipped.is_file() and not shipped.is_symlink()
    assert shipped.read_text() == (ROOT / "policies.yaml").read_text()
    default = subprocess.run(
        [sys.executable, "-c", "from parrot.cli.serve import resolve_config; "
         "from parrot.serve_config import ServeConfig; p = resolve_config(None); "
         "print(p, ServeConfig.load(p).policy.name)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert default.stdout.split() == [str(shipped), "app_centric"]
    out = tmp_path / "out"
    bench = subprocess.run([sys.executable, "-m", "parrot.cli.bench", "--workload", "map_reduce",
                            "--out", str(out), "--quiet", "--no-plots"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0, bench.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert results  # the benchmark ran on the packaged a100_llama13b profile


@pytest.mark.parametrize("command, extra", [
    ("from parrot.cli.engine import main; main(['--kind', 'builtin', '--name', 'e0'])", "engine"),
    ("from parrot.engines.builtin.prepare import main; sys.exit(main([]))", "engine"),
])
def test_a_missing_extra_is_one_line_naming_it(command, extra):
    # torch made unimportable, as on a machine without the extra
    code = f"import sys; sys.modules['torch'] = None; {command}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT),
                               # a standalone engine needs a secret before it builds anything
                               "PARROT_ENGINE_SECRET": "a-secret-for-the-test"}, timeout=120)
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"pip install 'parrot-serve[{extra}]'" in done.stderr
