import pytest

from parrot.errors import TemplateSyntaxError
from parrot.template import (CACHED_TEMPLATE_CHARS, MAX_OUTPUTS, MAX_PLACEHOLDERS, Placeholder,
                             Text, parse_template)


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


def test_names_are_computed_once_per_template():
    t = parse_template("{{input:a}} {{input:b}} {{input:a}} {{output:c}}")
    assert t.input_names is t.input_names and t.input_names == ("a", "b")
    assert t.output_names is t.output_names and t.output_names == ("c",)


def test_placeholder_and_output_caps_are_clear_client_errors():
    many_inputs = "".join(f"{{{{input:x{i}}}}}" for i in range(MAX_PLACEHOLDERS))
    with pytest.raises(TemplateSyntaxError, match=f"more than {MAX_PLACEHOLDERS} placeholders"):
        parse_template(many_inputs + "{{output:o}}")
    assert len(parse_template(many_inputs[:-len("{{input:x9999}}")] + "{{output:o}}")
               .segments) == MAX_PLACEHOLDERS
    outputs = "".join(f"{{{{output:y{i}}}}}" for i in range(MAX_OUTPUTS + 1))
    with pytest.raises(TemplateSyntaxError, match=f"more than {MAX_OUTPUTS} output") as info:
        parse_template(outputs)
    assert info.value.status == 400
    assert len(parse_template(outputs[:outputs.index(f"{{{{output:y{MAX_OUTPUTS}}}}}")])
               .output_names) == MAX_OUTPUTS


def test_a_short_template_is_parsed_once_a_long_one_each_time():
    short = "Summarise {{input:doc}} as {{output:summary}}"
    assert parse_template(short) is parse_template(short)
    long = "x" * CACHED_TEMPLATE_CHARS + " {{output:y}}"
    assert parse_template(long) is not parse_template(long)
    assert parse_template(long) == parse_template(long)


def test_a_bad_template_raises_every_time_it_is_sent():
    for _ in range(2):
        with pytest.raises(TemplateSyntaxError, match="unclosed placeholder"):
            parse_template("{{output:y")
