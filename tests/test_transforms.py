import json

import pytest

from parrot.errors import InvalidRequestError
from parrot.transforms import TransformError, apply_transforms, parse_transforms


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
