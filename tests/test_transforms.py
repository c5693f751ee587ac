import json
import time

import pytest

from parrot.errors import InvalidRequestError
from parrot.transforms import (MAX_JSON_CHARS, MAX_PATTERN_CHARS, REGEX_TIMEOUT_S, TransformError,
                               apply_transforms, parse_transforms)


def run(spec, value):
    return apply_transforms(parse_transforms(spec, "p"), value)


def test_strip_regex_json_path():
    assert run(["strip"], "  hi \n") == "hi"
    assert run([{"type": "regex", "pattern": r"Answer: (\w+)"}], "x Answer: yes.") == "yes"
    assert run([{"type": "json_path", "path": "a.1.b"}],
               'Sure! {"a": [0, {"b": "deep"}]} done') == "deep"
    assert run([{"type": "json_path", "path": "a"}], '{"a": {"x": 1}}') == '{"x": 1}'


def test_parse_list_and_json():
    assert json.loads(run(["parse_list"], "Items:\n- one\n2. two\n* three")) == \
        ["one", "two", "three"]
    assert json.loads(run(["parse_list"], 'here: ["a", "b"]')) == ["a", "b"]
    assert json.loads(run(["parse_json"], '```json\n{"k": [1, 2]}\n```')) == {"k": [1, 2]}


def test_runtime_failures_are_transform_errors():
    with pytest.raises(TransformError, match="no JSON"):
        run(["parse_json"], "nothing")
    with pytest.raises(TransformError, match="does not match"):
        run([{"type": "regex", "pattern": "z(.)"}], "abc")
    with pytest.raises(TransformError, match="no 'b'"):
        run([{"type": "json_path", "path": "b"}], '{"a": 1}')


@pytest.mark.parametrize("spec, message", [
    ("strip", "must be a list"),
    (["nope"], "unknown transform"),
    ([{"type": "regex"}], "needs a 'pattern'"),
    ([{"type": "regex", "pattern": "("}], "invalid regex"),
    ([{"type": "regex", "pattern": "(a)", "group": 2}], "group"),
    ([{"type": "json_path"}], "needs a non-empty 'path'"),
    ([{"type": "strip", "extra": 1}], "unknown transform field"),
])
def test_bad_specs(spec, message):
    with pytest.raises(InvalidRequestError, match=message):
        parse_transforms(spec, "p")


# --- hostile values: every failure is a TransformError, and none takes long -------------------

def _timed(spec, value):
    start = time.perf_counter()
    try:
        result: object = run(spec, value)
    except TransformError as exc:
        result = exc
    return result, time.perf_counter() - start


def test_catastrophic_regex_fails_within_its_deadline():
    result, seconds = _timed([{"type": "regex", "pattern": "(a|aa)+$"}], "a" * 60 + "b")
    assert isinstance(result, TransformError) and "took over" in str(result)
    assert seconds < 10 * REGEX_TIMEOUT_S


def test_regex_group_that_did_not_participate_is_a_transform_error():
    result, _ = _timed([{"type": "regex", "pattern": "(zzz)|"}], "abc")
    assert isinstance(result, TransformError) and "did not take part" in str(result)


def test_regex_pattern_length_is_capped():
    with pytest.raises(InvalidRequestError, match="at most"):
        parse_transforms([{"type": "regex", "pattern": "a" * (MAX_PATTERN_CHARS + 1)}], "p")


@pytest.mark.parametrize("kind", ["parse_json", "json_path"])
def test_deeply_nested_json_is_a_transform_error(kind):
    spec = [kind] if kind == "parse_json" else [{"type": kind, "path": "a"}]
    result, _ = _timed(spec, "[" * 5000)
    assert isinstance(result, TransformError) and "nested too deeply" in str(result)


@pytest.mark.parametrize("value", [
    "x[1," * 250_000,                 # a million chars of failing candidates (was ~60 s)
    "[" + "1," * 500_000,             # one long unterminated list
    "```" + " " * 200_000,            # an open code fence then whitespace (regex was quadratic)
    "- " + " " * 200_000,             # a bullet then whitespace
])
@pytest.mark.parametrize("kind", ["parse_json", "parse_list"])
def test_json_search_is_linear_on_hostile_text(kind, value):
    _, seconds = _timed([kind], value)
    assert seconds < 0.5


def test_json_text_size_is_capped():
    result, _ = _timed(["parse_json"], " " * (MAX_JSON_CHARS + 1) + "{}")
    assert isinstance(result, TransformError) and "over the" in str(result)


def test_json_found_after_some_brackets_and_bullets_parse():
    assert run(["parse_json"], 'see [note] and [x here {"a": [1,2]}') == '{"a": [1, 2]}'
    assert json.loads(run(["parse_list"], "- one\n10) ten\n-nope\n3.x\n* ")) == ["one", "ten"]


# --- regex patterns are bounded before they are compiled -------------------------------------

_BOMB_CHILD = r"""
import resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # a compile bomb dies here, not the host
from parrot.errors import InvalidRequestError
from parrot.transforms import parse_transforms
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
for pattern in sys.argv[1:]:
    try:
        parse_transforms([{"type": "regex", "pattern": pattern}], "p")
    except InvalidRequestError as exc:
        assert "expands to" in str(exc), exc
    else:
        raise SystemExit(f"accepted {pattern}")
grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(f"{time.perf_counter() - start:.3f} {grown_mb:.1f}")
"""


def test_regex_compile_bombs_are_refused_before_compiling():
    """The compile of these grows to tens of GB; they must be refused at once with the process
    barely growing (in a child under a 1 GiB address-space limit, so a regression fails this
    test instead of taking the host's memory)."""
    import subprocess
    import sys
    bombs = ["(?:(?:(?:a{1000}){1000}){1000}){1000}", "(?:a{65535}){65535}",
             "(?:a{1000}){1000}", "(?x) (?: a {100} ) {100}  # [ a comment hides nothing",
             "((a){10}){1000}", "(?:(?:ab|cd){100}){100}"]
    done = subprocess.run([sys.executable, "-c", _BOMB_CHILD, *bombs], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    seconds, grown_mb = map(float, done.stdout.split())
    assert seconds < 0.5 and grown_mb < 20, (seconds, grown_mb)


def test_ordinary_patterns_still_compile():
    for pattern in [r"Answer: (\w+)", r"(?i)score:\s*(\d{1,3})", "(?x) a b c", r"[^\n]{0,200}",
                    r"(\d+)-(?P<x>\w+)\1", "(?:foo){e<=1}"]:
        assert parse_transforms([{"type": "regex", "pattern": pattern, "group": 0}], "p")


# --- one call's transforms are bounded together ------------------------------------------------

def test_a_calls_transforms_share_one_budget_of_characters_and_time():
    from parrot.transforms import TransformBudget
    value = "a" * 3_000_000 + "b"
    transforms = parse_transforms([{"type": "regex", "pattern": "(a+)+c", "group": 0}] * 16,
                                  "p")
    budget = TransformBudget()
    start = time.perf_counter()
    with pytest.raises(TransformError):
        for _ in range(48):  # 48 inputs, each with 16 transforms, through one budget
            try:
                apply_transforms(transforms, value, budget)
            except TransformError as exc:
                if "budget" in str(exc):
                    raise
    assert time.perf_counter() - start < 0.6
    small = TransformBudget(chars=10)
    with pytest.raises(TransformError, match="budget of"):
        apply_transforms(parse_transforms(["strip", "strip"], "p"), "123456", small)


def test_a_tenants_transforms_draw_on_its_share_of_the_loop():
    from parrot.manager.transform_budget import TenantTransformBuckets
    buckets = TenantTransformBuckets(burst_s=0.05, rate=0.0)
    transforms = parse_transforms([{"type": "regex", "pattern": "(a|aa)+$"}], "p")
    for _ in range(3):
        budget = buckets.budget("greedy")
        with pytest.raises(TransformError):
            apply_transforms(transforms, "a" * 60 + "b", budget)
        buckets.spend("greedy", budget)
    assert buckets.budget("greedy").seconds == 0.0      # spent: its next call fails at once
    with pytest.raises(TransformError, match="budget"):
        apply_transforms(parse_transforms(["strip"], "p"), "x", buckets.budget("greedy"))
    assert buckets.budget("other").seconds > 0           # other tenants keep theirs
