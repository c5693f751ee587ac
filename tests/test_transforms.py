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
