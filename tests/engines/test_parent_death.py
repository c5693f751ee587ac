"""Engines die with the manager within 2 s, whatever they are doing (docs/RELIABILITY.md,
"Process lifetime"): a real parrot-serve with two launched simulated engines, one generating
and one stopped (SIGSTOP), is SIGKILLed; both engine processes must be gone 2 s later."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from pathlib import Path

from tests.serve_process import parrot_serve

# A slow simulated engine (the default latency profile): its requests are still generating
# when the manager is killed.
ENGINE = {"kind": "simulated", "params": {"max_context_len": 8192}}


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(") ", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def _post(url: str, body: dict, token: str | None = None) -> dict:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())


def test_engines_busy_or_stopped_die_within_2s_of_a_sigkilled_manager(tmp_path: Path):
    config = {"manager": {}, "policy": {"name": "least_queue"},
              "engines": [{"name": "e0", **ENGINE}, {"name": "e1", **ENGINE}]}
    engines: list[int] = []
    try:
        with parrot_serve(config, tmp_path) as (url, proc):
            engines = _children(proc.pid)
            assert len(engines) == 2, engines
            session = _post(url + "/v1/sessions", {})
            for i in range(8):  # both engines busy generating
                _post(url + "/v1/submit", {
                    "session_id": session["session_id"], "prompt": f"{i} {{{{output:y}}}}",
                    "sampling": {"max_tokens": 4000, "ignore_eos": True}}, session["token"])
            time.sleep(1.0)
            os.kill(engines[1], signal.SIGSTOP)  # frozen: runs no handler at all
            proc.kill()
            killed_at = time.monotonic()
            proc.wait()
            while any(_alive(p) for p in engines) and time.monotonic() - killed_at < 10:
                time.sleep(0.02)
            took = time.monotonic() - killed_at
            survivors = [p for p in engines if _alive(p)]
            assert not survivors and took < 2.0, (survivors, took)
    finally:
        for pid in engines:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
