"""The official `openai` client against parrot-serve running the builtin engine on SmolLM2
(CPU): real text, the model's own chat template, seeds, streaming."""

from __future__ import annotations

import openai
import pytest

from tests.serve_process import NEEDS_SMOLLM2, parrot_serve, smollm2_config

pytestmark = [pytest.mark.model, pytest.mark.slow, NEEDS_SMOLLM2]

CONFIG = smollm2_config(kv_cache_tokens=4096)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with parrot_serve(CONFIG, tmp_path_factory.mktemp("smol"), timeout_s=60) as (url, _):
        with openai.OpenAI(base_url=url + "/v1", api_key="unused") as c:
            yield c


def test_greedy_completion_knows_paris(client):
    assert [m.id for m in client.models.list().data] == ["smollm2"]
    reply = client.completions.create(model="smollm2", prompt="The capital of France is",
                                      max_tokens=8, temperature=0)
    assert reply.choices[0].text.startswith(" Paris")
    assert reply.usage.prompt_tokens == 5 and reply.usage.completion_tokens == 8
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="smollm2", prompt="The capital of France is", max_tokens=8, temperature=0,
        stream=True))
    assert streamed == reply.choices[0].text


def test_seeded_sampling_repeats_and_n_choices_differ(client):
    def sample() -> list[str]:
        reply = client.completions.create(model="smollm2", prompt="Once upon a time",
                                          max_tokens=8, temperature=0.9, seed=5, n=2)
        return [c.text for c in reply.choices]

    first = sample()
    assert first == sample() and first[0] != first[1]


def test_default_temperature_samples_so_n_choices_differ(client):
    """No temperature given: OpenAI's default 1.0 samples (greedy would give n copies of one
    answer); with a seed the reply repeats."""
    def sample() -> list[str]:
        reply = client.completions.create(model="smollm2", prompt="My favourite animal is",
                                          max_tokens=8, seed=11, n=3)
        return [c.text for c in reply.choices]

    first = sample()
    assert len(set(first)) == 3, first
    assert sample() == first


def test_chat_uses_the_models_template_and_ends_its_turn(client):
    from transformers import AutoTokenizer

    from parrot.engines.builtin.config import default_cache_dir

    messages = [{"role": "user", "content": "What is the capital of France? One word."}]
    # greedy, as the answer is asserted (the route's default temperature is OpenAI's 1.0)
    reply = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=32,
                                           temperature=0)
    assert "Paris" in reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"  # the model ended its turn (EOS)
    tokenizer = AutoTokenizer.from_pretrained(default_cache_dir() / "smollm2-135m-instruct")
    # the prompt the engine saw is exactly transformers' rendering of the model's template
    assert reply.usage.prompt_tokens == len(tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False))
    chunks = list(client.chat.completions.create(model="smollm2", messages=messages,
                                                 max_tokens=32, stream=True, temperature=0))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == \
        reply.choices[0].message.content
