"""Servers raise their open-file limit to the hard limit at start (parrot/cli/limits.py)."""

from __future__ import annotations

import resource
import subprocess
import sys

CHILD = """
import logging, resource
from parrot.cli.limits import raise_file_limit
logging.basicConfig(level=logging.INFO, format="%(message)s")
new = raise_file_limit(logging.getLogger("t"))
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
print(new, soft, hard)
"""


def _lower_soft_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))


def test_the_soft_file_limit_is_raised_to_the_hard_one_and_logged():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=60, preexec_fn=_lower_soft_limit)
    assert done.returncode == 0, done.stderr
    new, soft, hard = done.stdout.split()
    assert new == soft and (soft == hard or hard == "-1" and int(soft) >= 1 << 20)
    assert int(soft) > 256 or int(hard) == 256
    assert "open-file limit raised from 256" in done.stderr or int(hard) == 256


HEAP_CHILD = """
import gc, logging
from parrot.cli.limits import YOUNGER_PER_FULL_COLLECTION, settle_heap
import parrot.server.service  # what a server has imported by the time it is up
frozen = settle_heap(logging.getLogger("t"))
print(frozen, gc.get_freeze_count(), gc.get_threshold()[2], YOUNGER_PER_FULL_COLLECTION)
"""


def test_a_settled_heap_freezes_start_up_and_makes_full_collections_rarer():
    done = subprocess.run([sys.executable, "-c", HEAP_CHILD], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    frozen, count, third, rule = map(int, done.stdout.split())
    assert frozen == count > 10_000   # modules, classes and functions: out of every collection
    assert third == rule > 10          # Python's default is 10
