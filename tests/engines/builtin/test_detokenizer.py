"""Incremental detokenization and stop strings, with a byte-level toy tokenizer."""

from __future__ import annotations

from parrot.engines.builtin.detokenizer import TextStream


class ByteTokenizer:
    """Token i is byte i; decoding an incomplete UTF-8 sequence gives U+FFFD like HF."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


def run(text: str, stop: tuple[str, ...] = ()) -> tuple[list[str], bool]:
    stream = TextStream(ByteTokenizer(), list(b"prompt: "), stop)
    pieces = []
    for byte in text.encode():
        piece, hit = stream.push(byte)
        pieces.append(piece)
        if hit:
            return pieces, True
    pieces.append(stream.flush())
    return pieces, False


def test_multibyte_characters_are_never_split():
    pieces, hit = run("héllo → 世界")
    assert "".join(pieces) == "héllo → 世界" and not hit
    assert all("\ufffd" not in p for p in pieces)
    assert pieces[1:3] == ["", "é"]          # the first byte of é waits for the second


def test_stop_string_spanning_tokens_is_excluded():
    pieces, hit = run("Answer: 42\nQuestion: more", stop=("\nQuestion:",))
    assert hit and "".join(pieces) == "Answer: 42"


def test_held_back_prefix_of_a_stop_string_is_released():
    pieces, hit = run("a ## b", stop=("###",))
    assert not hit and "".join(pieces) == "a ## b"
    assert pieces[3] == ""                     # "#" held while it could start "###"


def test_earliest_of_several_stop_strings_wins():
    pieces, hit = run("x END y STOP", stop=("STOP", "END"))
    assert hit and "".join(pieces) == "x "


class FastLike:
    """A transformers-style fast tokenizer: `decode` wraps `backend_tokenizer.decode` and
    may clean up spaces after it."""

    def __init__(self, clean_up: bool) -> None:
        self.clean_up_tokenization_spaces = clean_up
        self.backend_tokenizer = self
        self.calls: list[str] = []

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        self.calls.append("decode")
        return bytes(ids).decode("utf-8", errors="replace")


def test_the_rust_decoder_is_used_only_where_it_gives_the_same_text():
    from parrot.engines.builtin.detokenizer import decoder

    fast = FastLike(clean_up=False)
    assert decoder(fast).func == fast.backend_tokenizer.decode      # same object here
    cleaning = FastLike(clean_up=True)
    cleaning.backend_tokenizer = ByteTokenizer()                    # another object
    assert decoder(cleaning).func == cleaning.decode                # the wrapper, cleaning
    plain = ByteTokenizer()
    assert decoder(plain).func == plain.decode


def test_a_real_fast_tokenizer_streams_the_same_text_either_way():
    import pytest

    from parrot.engines.builtin.detokenizer import decoder

    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    model = tokenizers.models.BPE(vocab={"h": 0, "é": 1, " ": 2, "l": 3, "o": 4, "hé": 5},
                                  merges=[("h", "é")])
    raw = tokenizers.Tokenizer(model)
    raw.add_special_tokens(["<e>"])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<e>",
                                                clean_up_tokenization_spaces=False)
    ids = [5, 3, 3, 4, 2, 0, 1, 6]
    text = fast.decode(ids, skip_special_tokens=True)
    assert decoder(fast)(ids) == text and "<e>" not in text and "hé" in text
    assert decoder(fast).func == fast.backend_tokenizer.decode
