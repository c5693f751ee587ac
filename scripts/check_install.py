"""Check the package as a user gets it: a wheel, installed into a fresh venv outside the source
tree (no editable install), then `parrot --version`, `parrot-bench` for every workload with its
default arguments, `parrot-serve --config sim` (GET /metrics parsed, one OpenAI completion) and
`parrot-serve` with no `--config` (the shipped policies.yaml: it starts, or, without the
[engine] extra, says in one line which extra to install) from another folder.

    python scripts/check_install.py [--python /path/to/python3.11] [--keep]

Needs the package index (pip installs the dependencies and the [bench] extra). Prints one line
per check and exits non-zero on the first failure.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(cmd: list[str], cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"FAILED: {' '.join(cmd)}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.stdout


def check_serve(bin_dir: Path, work: Path) -> None:
    proc = subprocess.Popen([str(bin_dir / "parrot-serve"), "--config", "sim", "--port", "0",
                             "--log-level", "WARNING"], cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        match = re.search(r"ready at (\S+)", proc.stdout.readline())
        if match is None:
            raise SystemExit(f"FAILED: parrot-serve --config sim\n{proc.stderr.read()[-2000:]}")
        url = match.group(1)
        token = proc.stdout.readline().rsplit(" ", 1)[-1].strip()  # the generated admin token
        models = json.loads(urllib.request.urlopen(url + "/v1/models", timeout=30).read())
        model = models["data"][0]["id"]
        request = urllib.request.Request(url + "/v1/completions", method="POST",
                                         headers={"Content-Type": "application/json"},
                                         data=json.dumps({"model": model, "prompt": "Hi",
                                                          "max_tokens": 2}).encode())
        reply = json.loads(urllib.request.urlopen(request, timeout=120).read())
        assert reply["usage"]["completion_tokens"] == 2, reply
        scrape = urllib.request.Request(url + "/metrics",
                                        headers={"Authorization": f"Bearer {token}"})
        metrics = urllib.request.urlopen(scrape, timeout=30).read().decode()
        probe = ("from prometheus_client.parser import text_string_to_metric_families as f;"
                 "import sys; print(len(list(f(sys.stdin.read()))))")
        families = subprocess.run([str(bin_dir / "python"), "-c", probe], input=metrics,
                                  capture_output=True, text=True, check=True).stdout.strip()
        print(f"ok  parrot-serve --config sim: completion of {model}, "
              f"/metrics ({families} families)")
    finally:
        proc.terminate()
        proc.wait(60)


def check_default_config(bin_dir: Path, work: Path) -> None:
    """`parrot-serve` with no --config, from a folder without policies.yaml: the shipped one."""
    has_torch = subprocess.run([str(bin_dir / "python"), "-c", "import torch"],
                               capture_output=True).returncode == 0
    proc = subprocess.Popen([str(bin_dir / "parrot-serve"), "--port", "0", "--log-level",
                             "WARNING"], cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        if "ready at" in line:
            print("ok  parrot-serve (no --config): the shipped policies.yaml, ready")
            return
        err = proc.stderr.read()
        if has_torch or "parrot-serve[engine]" not in err or "Traceback" in err:
            raise SystemExit(f"FAILED: parrot-serve (no --config)\n{line}{err[-2000:]}")
        print("ok  parrot-serve (no --config): the shipped policies.yaml; without the engine "
              "extra it names it: " + err.strip().splitlines()[-1][:120])
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter the venv is made from (default: this one)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="parrot-install-"))
    try:
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", ".", "-w", str(work / "dist")],
            ROOT)
        wheel = next((work / "dist").glob("*.whl"))
        print(f"ok  built {wheel.name}")
        run([args.python, "-m", "venv", str(work / "venv")], work)
        bin_dir = work / "venv" / "bin"
        run([str(bin_dir / "pip"), "install", "-q", f"{wheel}[bench]"], work)
        where = run([str(bin_dir / "python"), "-c", "import parrot; print(parrot.__file__)"],
                    work).strip()
        assert str(ROOT) not in where, f"imported the source tree: {where}"
        print(f"ok  installed (parrot at {where})")
        print("ok  " + run([str(bin_dir / "parrot"), "--version"], work).strip())
        workloads = run([str(bin_dir / "python"), "-c", "from parrot.sim.workloads.registry "
                         "import WORKLOADS; print(' '.join(sorted(WORKLOADS)))"], work).split()
        for workload in workloads:
            out = work / "out" / workload
            run([str(bin_dir / "parrot-bench"), "--workload", workload, "--out", str(out),
                 "--quiet"], work)
            assert (out / "results.json").is_file()
            print(f"ok  parrot-bench --workload {workload} wrote results.json and "
                  f"{len(list(out.glob('*.png')))} plots")
        check_serve(bin_dir, work)
        check_default_config(bin_dir, work)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
