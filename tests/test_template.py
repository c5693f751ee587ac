import pytest

from parrot.errors import TemplateSyntaxError
from parrot.template import Placeholder, Text, parse_template


def test_segments_and_names():
    t = parse_template("Hi {{input:a}} and {{ input : b }} then {{input:a}} -> {{output:c}}!")
    assert t.segments == (Text("Hi "), Placeholder("input", "a"), Text(" and "),
                          Placeholder("input", "b"), Text(" then "), Placeholder("input", "a"),
                          Text(" -> "), Placeholder("output", "c"), Text("!"))
    assert t.input_names == ("a", "b") and t.output_names == ("c",)
    assert t.render({"a": "1", "b": "2", "c": "3"}) == "Hi 1 and 2 then 1 -> 3!"


def test_literal_braces_are_text():
    t = parse_template('JSON {{"k": 1}} {{output:o}}')
    assert t.segments[0] == Text('JSON {{"k": 1}} ')


@pytest.mark.parametrize("source, message", [
    ("{{input:x {{output:y}}", "invalid placeholder name"),
    ("{{output:y", "unclosed"),
    ("{{foo:x}} {{output:y}}", "unknown placeholder kind 'foo'"),
    ("{{output:y}} {{output:y}}", "duplicate output"),
    ("{{input:y}} {{output:y}}", "both input and output"),
    ("{{input:9x}} {{output:y}}", "invalid placeholder name"),
    ("just text", "at least one"),
])
def test_syntax_errors(source, message):
    with pytest.raises(TemplateSyntaxError, match=message):
        parse_template(source)
