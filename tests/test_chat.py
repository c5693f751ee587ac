"""Chat templates: messages → prompt through the model's template; chat semantic functions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parrot.chat import (CHATML, ChatTemplate, chat_prompt, load_chat_template,
                         parse_messages)
from parrot.errors import InvalidRequestError

SMOLLM2 = Path.home() / ".cache/parrot/models/smollm2-135m-instruct"


def test_chatml_default():
    text = ChatTemplate().render(parse_messages([{"role": "user", "content": "hi"}]))
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_messages_are_validated():
    with pytest.raises(InvalidRequestError, match="role"):
        parse_messages([{"role": "wizard", "content": "x"}])
    with pytest.raises(InvalidRequestError, match="list of 1 to"):
        parse_messages([])
    parts = parse_messages([{"role": "user", "content": [{"type": "text", "text": "a"},
                                                          {"type": "text", "text": "b"}]}])
    assert parts[0].content == "ab"
    with pytest.raises(InvalidRequestError, match="text parts"):
        parse_messages([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])


def test_template_errors_are_request_errors():
    strict = ChatTemplate("{% if messages[0]['role'] != 'system' %}"
                          "{{ raise_exception('system first') }}{% endif %}ok")
    with pytest.raises(InvalidRequestError, match="system first"):
        strict.render(parse_messages([{"role": "user", "content": "x"}]))


def test_chat_prompt_multi_turn_keeps_placeholders():
    rendered = chat_prompt("Draft about {{input:topic}}. {{output:draft}} "
                           "Shorter: {{output:short}}",
                           "Be brief.", ChatTemplate(CHATML))
    assert rendered == ("<|im_start|>system\nBe brief.<|im_end|>\n"
                        "<|im_start|>user\nDraft about {{input:topic}}.<|im_end|>\n"
                        "<|im_start|>assistant\n{{output:draft}}<|im_end|>\n"
                        "<|im_start|>user\nShorter:<|im_end|>\n"
                        "<|im_start|>assistant\n{{output:short}}<|im_end|>\n")
    with pytest.raises(InvalidRequestError, match="after the last output"):
        chat_prompt("{{output:a}} trailing words", None, ChatTemplate())
    with pytest.raises(InvalidRequestError, match="needs at least one"):
        chat_prompt("no outputs {{input:x}}", None, ChatTemplate())
    shouting = ChatTemplate("{% for m in messages %}{{ m['content'] | upper }}{% endfor %}")
    with pytest.raises(InvalidRequestError, match="changed the prompt's placeholders"):
        chat_prompt("Hi {{input:x}} {{output:y}}", None, shouting)


def test_load_template_from_folder_and_file(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": "{{ bos_token }}{{ messages[0]['content'] }}",
        "bos_token": {"content": "<s>"}, "eos_token": "</s>"}))
    template = load_chat_template(str(tmp_path))
    assert (template.bos_token, template.eos_token) == ("<s>", "</s>")
    assert template.render(parse_messages([{"role": "user", "content": "x"}])) == "<s>x"
    (tmp_path / "t.jinja").write_text("[{{ messages[0]['content'] }}]")
    assert load_chat_template(str(tmp_path / "t.jinja")).source == "[{{ messages[0]['content'] }}]"
    with pytest.raises(InvalidRequestError, match="no chat template"):
        load_chat_template(str(tmp_path / "missing"))


@pytest.mark.skipif(not SMOLLM2.is_dir(), reason="run python -m parrot.engines.builtin.prepare")
def test_smollm2_folder_template_matches_transformers():
    from transformers import AutoTokenizer

    messages = [{"role": "user", "content": "What is 2+2?"}]
    ours = load_chat_template(str(SMOLLM2)).render(parse_messages(messages))
    theirs = AutoTokenizer.from_pretrained(SMOLLM2).apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)
    assert ours == theirs and "SmolLM" in ours
