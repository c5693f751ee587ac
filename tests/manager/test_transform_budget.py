"""User transforms cannot hold the manager's loop (docs/SECURITY.md): compile bombs are a 400
before anything is compiled, and one call's transforms share one bounded budget."""

from __future__ import annotations

import json
import time

from tests.server.front_door import call, config, loop_gaps, new_session, running


async def test_a_regex_compile_bomb_is_a_400_at_once():
    async with running(config()) as (_, http):
        sid, auth = await new_session(http)
        for pattern in ("(?:a{1000}){1000}", "(?:(?:(?:a{1000}){1000}){1000}){1000}",
                        "(?:a{65535}){65535}"):
            body = {"session_id": sid, "prompt": "{{input:x}}{{output:y}}", "placeholders": [
                {"name": "x", "in_out": "input", "value": "aaa",
                 "transforms": [{"type": "regex", "pattern": pattern, "group": 0}]}]}
            start = time.perf_counter()
            status, reply, _ = await call(http, "POST", "/v1/submit", body, auth)
            assert time.perf_counter() - start < 0.3
            assert status == 400 and "expands to" in reply["error"]["message"], reply


def _inputs_of_one_variable(sid: str, var_id: str, transforms: list, count: int = 48) -> dict:
    """A submit of `count` inputs, each the variable `var_id` through `transforms`."""
    names = [f"x{i}" for i in range(count)]
    return {"session_id": sid, "prompt": "".join(f"{{{{input:{n}}}}}" for n in names)
            + "{{output:y}}",
            "placeholders": [{"name": n, "in_out": "input", "semantic_var_id": var_id,
                              "transforms": transforms} for n in names]}


async def test_many_transforms_over_a_large_value_fail_the_call_within_its_budget():
    """48 inputs x 16 regex transforms over a 3M-character value: each search alone is under
    its deadline, but together they would hold the loop for seconds."""
    async with running(config()) as (_, http):
        sid, auth = await new_session(http)
        _, var, _ = await call(http, "POST", "/v1/variables", raw=json.dumps(
            {"session_id": sid, "value": "ab" * 1_500_000}).encode(), headers=auth)
        regexes = [{"type": "regex", "pattern": "(.*)"}] * 16  # each search: a few ms
        body = _inputs_of_one_variable(sid, var["semantic_var_id"], regexes)
        start = time.perf_counter()
        status, reply, _ = await call(http, "POST", "/v1/submit", body, auth)
        assert status == 200, reply
        out = reply["placeholders"][-1]["semantic_var_id"]
        status, got, _ = await call(http, "POST", "/v1/get",
                                    {"session_id": sid, "semantic_var_id": out}, auth)
        assert time.perf_counter() - start < 1.0
        assert status == 424 and "budget" in got["error"]["message"], got
        status, _, _ = await call(http, "GET", "/healthz")
        assert status == 200


async def test_transforms_run_off_the_loop():
    """Four calls wait on one variable, each with 16 backtracking regex transforms of 48
    inputs; the `set` that releases them used to run all their transforms (the tenant's whole
    0.5 s burst) in one go on the loop. In a worker, the loop keeps ticking, and the calls
    fail exactly as before: their budget spent, a 424 on `get`."""
    async with running(config()) as (_, http):
        sid, auth = await new_session(http)
        _, var, _ = await call(http, "POST", "/v1/variables", {"session_id": sid}, auth)
        # Each search backtracks until its deadline (no `b` in the value).
        regexes = [{"type": "regex", "pattern": "((?:a+)+)b"}] * 16
        body = _inputs_of_one_variable(sid, var["semantic_var_id"], regexes)
        outs = []
        for _ in range(4):
            status, reply, _ = await call(http, "POST", "/v1/submit", body, auth)
            assert status == 200, reply
            outs.append(reply["placeholders"][-1]["semantic_var_id"])
        async with loop_gaps() as gaps:
            status, _, _ = await call(http, "POST", f"/v1/variables/{var['semantic_var_id']}",
                                      raw=json.dumps({"session_id": sid,
                                                      "value": "a" * 3_000_000}).encode(),
                                      headers=auth)
            assert status == 200
            errors = []
            for out in outs:
                status, got, _ = await call(http, "POST", "/v1/get",
                                            {"session_id": sid, "semantic_var_id": out}, auth)
                assert status == 424, got
                errors.append(got["error"]["message"])
        assert all(e.startswith("input transform failed: regex '((?:a+)+)b' took over ")
                   or "the call's transforms took their whole budget" in e for e in errors), errors
        # Generous for a loaded 2-core machine; on the loop this was the whole 0.5 s burst.
        assert max(gaps) < 0.25, max(gaps)
