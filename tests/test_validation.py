"""parrot.validation.Checks: one message form for every configuration check, naming the key."""

from __future__ import annotations

import enum

import pytest

from parrot.errors import ConfigError, EngineConfigError, InvalidRequestError
from parrot.validation import Checks, is_int, is_number


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


CHECK = Checks("section")


@pytest.mark.parametrize("call, message", [
    (lambda: CHECK.require(False, "k", 3, "an even number"),
     "section.k: 3 is not valid; allowed: an even number"),
    (lambda: CHECK.number("k", "1", minimum=0),
     "section.k: '1' is not valid; allowed: number >= 0"),
    (lambda: CHECK.number("k", True, minimum=0), "section.k: True is not valid"),
    (lambda: CHECK.number("k", float("nan")), "section.k: nan is not valid; allowed: number"),
    (lambda: CHECK.number("k", float("inf"), minimum=0), "section.k: inf is not valid"),
    (lambda: CHECK.number("k", 7, minimum=0, maximum=5, integer=True),
     "section.k: 7 is out of range; allowed: integer >= 0 and <= 5"),
    (lambda: CHECK.number("k", 1.5, minimum=0, integer=True),
     "section.k: 1.5 is not valid; allowed: integer >= 0"),
    (lambda: CHECK.positive_int("k", 0), "section.k: 0 is out of range; allowed: integer >= 1"),
    (lambda: CHECK.positive_int("k", None), "section.k: None is not valid; allowed: integer >= 1"),
    (lambda: CHECK.positive_int("k", -2, optional=True),
     "section.k: -2 is out of range; allowed: integer >= 1 or null"),
    (lambda: CHECK.positive("k", 0), "section.k: 0 is out of range; allowed: number > 0"),
    (lambda: CHECK.fraction("k", 0.0), "section.k: 0.0 is out of range; allowed: number > 0.0 "
                                       "and <= 1.0"),
    (lambda: CHECK.fraction("k", 0.99, maximum=0.95), "section.k: 0.99 is out of range"),
    (lambda: CHECK.boolean("k", "yes"), "section.k: 'yes' is not valid; allowed: true or false"),
    (lambda: CHECK.text("k", ""), "section.k: '' is not valid; allowed: a non-empty string"),
    (lambda: CHECK.one_of("k", "x", ("a", "b")), "section.k: 'x' is not valid; allowed: one of "
                                                 "['a', 'b']"),
    (lambda: CHECK.enum("k", "green", Color), "section.k: 'green' is not valid; allowed: one of "
                                              "['red', 'blue']"),
    (lambda: CHECK.enum("k", [1], Color), "section.k: [1] is not valid"),
    (lambda: CHECK.mapping("k", [1]), "section.k: [1] is not valid; allowed: a mapping"),
    (lambda: CHECK.keys({"a": 1, "zz": 2}, ("a", "b")),
     "section: unknown key(s) ['zz']; allowed: ['a', 'b']"),
    (lambda: CHECK.keys({"a": 1}, ("a", "b"), required=("b",)),
     "section: required key 'b' is missing"),
    (lambda: Checks().positive_int("top", 0), "top: 0 is out of range"),
    (lambda: Checks().keys({"x": 1}, ()), "<root>: unknown key(s) ['x']"),
])
def test_each_check_names_the_key_and_what_is_allowed(call, message):
    with pytest.raises(ConfigError) as info:
        call()
    assert str(info.value) == message or str(info.value).startswith(message)
    assert info.value.key == message.split(": ")[0]
    assert isinstance(info.value, InvalidRequestError) and info.value.status == 400


@pytest.mark.parametrize("valid,invalid", [
    (lambda: CHECK.require(True, "k", 3, "x"), lambda: CHECK.require(False, "k", 3, "x")),
    (lambda: CHECK.number("k", 0, minimum=0, maximum=0, integer=True),
     lambda: CHECK.number("k", 1, minimum=0, maximum=0, integer=True)),
    (lambda: CHECK.number("k", 0.5, minimum=0, exclusive_minimum=True),
     lambda: CHECK.number("k", 0, minimum=0, exclusive_minimum=True)),
    (lambda: CHECK.positive_int("k", None, optional=True), lambda: CHECK.positive_int("k", None)),
    (lambda: CHECK.fraction("k", 1), lambda: CHECK.fraction("k", 1.01)),
    (lambda: CHECK.boolean("k", False), lambda: CHECK.boolean("k", 0)),
    (lambda: CHECK.text("k", None, optional=True), lambda: CHECK.text("k", None)),
    (lambda: CHECK.one_of("k", "a", ("a", "b")), lambda: CHECK.one_of("k", "c", ("a", "b"))),
    (lambda: CHECK.keys({"a": 1, "b": 2}, ("a", "b"), required=("b",)),
     lambda: CHECK.keys({"a": 1}, ("a", "b"), required=("b",))),
])
def test_valid_values_pass_and_their_neighbours_do_not(valid, invalid):
    """Each check accepts a value at its boundary and rejects the one just past it."""
    assert valid() is None
    with pytest.raises(ConfigError):
        invalid()


def test_enum_returns_the_member_and_the_error_class_is_the_bound_one():
    assert CHECK.enum("k", "red", Color) is Color.RED
    assert CHECK.enum("k", Color.BLUE, Color) is Color.BLUE
    with pytest.raises(EngineConfigError) as info:
        Checks("simulated engine", EngineConfigError).positive_int("num_blocks", 0)
    assert info.value.key == "simulated engine.num_blocks"


def test_type_predicates():
    assert is_int(3) and not is_int(True) and not is_int(3.0)
    assert is_number(2.5) and is_number(2) and not is_number(False)
    assert not is_number(float("inf")) and not is_number(float("nan")) and not is_number("1")


def test_key_value_reads_yaml_scalars_and_refuses_what_is_not_an_assignment():
    from parrot.validation import key_value

    assert key_value("shared_prefix_decode=false") == ("shared_prefix_decode", False)
    assert key_value(" token_capacity = 4096") == ("token_capacity", 4096)
    assert key_value("prefill_attention=paged") == ("prefill_attention", "paged")
    assert key_value("tag=a=b") == ("tag", "a=b")          # only the first = splits
    assert key_value("empty=") == ("empty", None)
    assert key_value("no_equals") is None and key_value("=value") is None
