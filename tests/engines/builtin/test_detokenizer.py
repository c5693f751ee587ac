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
