import pytest

from parrot.errors import InvalidRequestError
from parrot.sampling import SamplingParams


def test_defaults_and_round_trip():
    p = SamplingParams.from_json({"max_tokens": 5, "temperature": 1, "stop": "\n", "seed": 3})
    assert p == SamplingParams(max_tokens=5, temperature=1.0, stop=("\n",), seed=3)
    assert SamplingParams.from_json(p.to_json()) == p
    assert p.merged({"top_k": 4}).top_k == 4 and SamplingParams().is_greedy


@pytest.mark.parametrize("bad", [
    {"max_tokens": 0}, {"max_tokens": 1.5}, {"temperature": -0.1}, {"top_p": 0},
    {"top_p": 1.5}, {"top_k": -1}, {"seed": -1}, {"stop": [""]}, {"stop": 3},
    {"stop_token_ids": [-1]}, {"ignore_eos": "yes"}, {"nucleus": 0.9}, {"max_tokens": True},
])
def test_invalid_values_name_the_field(bad):
    with pytest.raises(InvalidRequestError, match=next(iter(bad))):
        SamplingParams.from_json(bad)
