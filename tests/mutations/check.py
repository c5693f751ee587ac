"""Do the tests catch what they claim? Apply one-line mutations one at a time and expect failure.

Each mutation (tests/mutations/catalogue.py) is (file, the function it lives in, exact old
snippet, new snippet, the test node ids that must catch it). This script runs them: it copies
the repository's files (tracked and untracked-but-not-ignored) to a temporary folder once,
checks that the named tests pass there unmutated, then for each mutation: replaces the snippet
(it must occur exactly once in its function: anchors.py), runs the named tests with `-x`, a
per-test timeout and a wall-clock limit, records whether they failed, and restores the file. It
prints a table and exits non-zero if any mutation survived, any snippet no longer matches (re-
anchor it after a refactor), or a baseline run failed.

    python tests/mutations/check.py                 # all mutations
    python tests/mutations/check.py --only builtin_lru_victim scheduler_fifo
    python tests/mutations/check.py --list
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from anchors import AnchorError, apply  # this folder is on sys.path: both modules beside it
from catalogue import MUTATIONS, Mutation

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Outcome:
    mutation: Mutation
    status: str               # caught | SURVIVED | NOT FOUND | BASELINE FAILED
    seconds: float
    detail: str = ""

    @property
    def is_ok(self) -> bool:
        return self.status == "caught"


def copy_tree(dest: Path) -> None:
    """The working tree as git sees it (tracked plus untracked-not-ignored files). The copy is
    first on PYTHONPATH, ahead of the editable install's finder, so its parrot_kernels/ (a
    mutated kernel) is the one imported."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


def run_tests(root: Path, tests: tuple[str, ...], per_test_s: int,
              limit_s: int) -> tuple[bool, float, str]:
    """(passed, seconds, why it failed); a run past limit_s counts as failed."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1",
           "COLUMNS": "400"}  # pytest cuts the summary line to the terminal width
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
               f"--timeout={per_test_s}", *tests]
    started = time.monotonic()
    try:
        proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True,
                              timeout=limit_s)
    except subprocess.TimeoutExpired:
        return False, time.monotonic() - started, f"killed after {limit_s} s"
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    # The short summary's first FAILED/ERROR line says why (an assertion, a pytest-timeout).
    # (Captured log lines also start with "ERROR", followed by spaces, not a test id.)
    reason = next((ln for ln in lines if ln.startswith(("FAILED ", "ERROR tests"))),
                  lines[-1] if lines else "")
    return proc.returncode == 0, time.monotonic() - started, reason


def check(mutation: Mutation, root: Path, per_test_s: int, limit_s: int) -> Outcome:
    path = root / mutation.path
    original = path.read_text()
    try:
        mutated = apply(original, mutation.where, mutation.old, mutation.new)
    except AnchorError as exc:
        return Outcome(mutation, "NOT FOUND", 0.0, str(exc))
    path.write_text(mutated)
    try:
        passed, seconds, last = run_tests(root, mutation.tests, per_test_s, limit_s)
    finally:
        path.write_text(original)
    return Outcome(mutation, "SURVIVED" if passed else "caught", seconds, last)


def print_table(outcomes: list[Outcome]) -> None:
    rows = [("mutation", "file", "test(s)", "result", "seconds")]
    rows += [(o.mutation.name, o.mutation.path,
              " ".join(t.split("::")[-1] if "::" in t else t for t in o.mutation.tests),
              o.status, f"{o.seconds:.1f}") for o in outcomes]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths)))
        if i == 0:
            print("-+-".join("-" * w for w in widths))
    for o in outcomes:
        print(f"{o.mutation.name}: {o.status}: {o.detail[:200]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these mutations only")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--per-test-timeout", type=int, default=30,
                        help="pytest-timeout per test, seconds (default 30)")
    parser.add_argument("--limit", type=int, default=60,
                        help="wall-clock limit per mutation run, seconds (default 60)")
    args = parser.parse_args()
    known = {m.name: m for m in MUTATIONS}
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name}: {m.path} -> {', '.join(m.tests)}")
        return 0
    unknown = sorted(set(args.only or ()) - set(known))
    if unknown:
        parser.error(f"unknown mutation(s) {unknown}; known: {sorted(known)}")
    chosen = [known[n] for n in args.only] if args.only else list(MUTATIONS)
    with tempfile.TemporaryDirectory(prefix="parrot-mutants-") as tmp:
        root = Path(tmp)
        copy_tree(root)
        tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        passed, seconds, last = run_tests(root, tests, args.per_test_timeout,
                                          args.limit * len(chosen))
        print(f"baseline (unmutated): {'pass' if passed else 'FAIL'} in {seconds:.1f} s")
        if not passed:
            print(f"the named tests fail without any mutation: {last}")
            return 2
        outcomes = [check(m, root, args.per_test_timeout, args.limit) for m in chosen]
    print_table(outcomes)
    survived = [o for o in outcomes if not o.is_ok]
    print(f"{len(outcomes) - len(survived)}/{len(outcomes)} mutations caught")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
