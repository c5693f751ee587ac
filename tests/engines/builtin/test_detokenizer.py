"""Incremental detokenization and stop strings, with a byte-level toy tokenizer."""

from __future__ import annotations

import random

import pytest

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
    from parrot.engines.builtin.detokenizer import decoder, rust_backend

    def chosen(tokenizer):
        return decoder(tokenizer, rust_backend(tokenizer)).func

    fast = FastLike(clean_up=False)
    assert chosen(fast) == fast.backend_tokenizer.decode            # same object here
    cleaning = FastLike(clean_up=True)
    cleaning.backend_tokenizer = ByteTokenizer()                    # another object
    assert chosen(cleaning) == cleaning.decode                      # the wrapper, cleaning
    plain = ByteTokenizer()
    assert chosen(plain) == plain.decode


def test_a_real_fast_tokenizer_streams_the_same_text_either_way():
    import pytest

    from parrot.engines.builtin.detokenizer import decoder, rust_backend

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
    assert decoder(fast, rust_backend(fast))(ids) == text and "<e>" not in text and "hé" in text
    assert rust_backend(fast) is fast.backend_tokenizer


# -- the Rust stream (tokenizers' DecodeStream) against the Python rule -----------------------

def byte_level_tokenizer_json(path):
    """GPT-2 / SmolLM2 style: byte-level BPE (a character of several bytes spans tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    for word in ("th", "he", "Ġa", "Ġth", "Ġthe"):
        vocab[word] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, [("t", "h"), ("h", "e"), ("Ġ", "a"), ("Ġ", "th"),
                                       ("Ġth", "e")]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(path / "tokenizer.json"))


def byte_fallback_tokenizer_json(path):
    """LLaMA / sentencepiece style: "▁" for spaces, bytes as <0xNN> tokens, the decode's
    leading space stripped (so a token's text depends on its left neighbour)."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece in ("▁the", "▁a", "▁", "t", "h", "e", "a"):
        vocab[piece] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, [], byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<s>", "</s>"])
    tok.save(str(path / "tokenizer.json"))


class PythonOnly:
    """A tokenizer without a Rust backend to offer: TextStream keeps the Python rule."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer

    def decode(self, ids, skip_special_tokens=True):
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


def stream_text(tokenizer, context, generated, stop=()):
    stream = TextStream(tokenizer, context, stop)
    pieces = []
    for token in generated:
        piece, hit = stream.push(token)
        pieces.append(piece)
        if hit:
            return pieces, True, stream
    pieces.append(stream.flush())
    return pieces, False, stream


@pytest.mark.parametrize("build,rust", [(byte_level_tokenizer_json, True),
                                        (byte_fallback_tokenizer_json, False)])
def test_the_rust_stream_gives_the_python_rules_pieces_token_by_token(tmp_path, build, rust):
    from parrot.engines.builtin.llama.tokenizer import FastTokenizer

    build(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{}")
    fast = FastTokenizer.from_folder(tmp_path)
    rng = random.Random(7)
    texts = ["the a 世界 é → 🎉", "a the\n\tthe  é", "🎉🎉 三 四 五", " the"]
    vocab = len(fast)
    compared = in_rust = 0
    for trial in range(600):
        if trial % 2:
            ids = fast(rng.choice(texts) + rng.choice(texts), add_special_tokens=False).input_ids
        else:
            ids = [rng.randrange(vocab) for _ in range(rng.randrange(1, 24))]
        cut = rng.randrange(len(ids) + 1)
        stop = rng.choice([(), ("e ",), ("世",)])
        fast_pieces = stream_text(fast, ids[:cut], ids[cut:], stop)
        python = stream_text(PythonOnly(fast), ids[:cut], ids[cut:], stop)
        assert fast_pieces[:2] == python[:2], (ids[:cut], ids[cut:], stop)
        assert not python[2].in_rust
        compared += 1
        in_rust += fast_pieces[2].in_rust
    if rust:
        assert in_rust > compared // 2   # most prompts end on a whole character
    else:
        assert in_rust == 0              # sentencepiece-style: the Python rule throughout


def test_a_context_ending_inside_a_character_keeps_the_python_rule(tmp_path):
    from parrot.engines.builtin.llama.tokenizer import FastTokenizer

    byte_level_tokenizer_json(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{}")
    fast = FastTokenizer.from_folder(tmp_path)
    ids = fast("a 世界", add_special_tokens=False).input_ids   # 世 and 界: three bytes each
    assert TextStream(fast, ids).in_rust
    split = TextStream(fast, ids[:-1])                          # the prompt ends inside 界
    assert not split.in_rust
    assert "".join(stream_text(fast, ids[:-1], ids[-1:] + ids[:2])[0]) == \
        "".join(stream_text(PythonOnly(fast), ids[:-1], ids[-1:] + ids[:2])[0])


class NotRustBackend:
    """A backend that says it is byte-level but that tokenizers' Rust stream cannot take (it
    wants a Rust Tokenizer): every step of the stream raises."""

    def __init__(self) -> None:
        from tokenizers import decoders

        self.decoder = decoders.ByteLevel()

    def decode(self, ids, skip_special_tokens=True):
        return ByteTokenizer().decode(ids)


class FailingRustTokenizer:
    clean_up_tokenization_spaces = False

    def __init__(self) -> None:
        self.backend_tokenizer = NotRustBackend()


@pytest.mark.parametrize("prompt,failed_at", [(b"", "falls back"),
                                               (b"prompt: ", "uses the Python rule")])
def test_a_rust_stream_that_fails_hands_the_stream_to_the_python_rule(prompt, failed_at, caplog):
    """Failing while reading the prompt's window (a prompt) or at the first token (none): the
    Python rule streams the same text, and the step goes on."""
    text = "héllo → 世界, stop here"

    def pieces(tokenizer) -> tuple[list[str], TextStream]:
        stream = TextStream(tokenizer, list(prompt), ("stop",))
        out = []
        for byte in text.encode():
            piece, hit = stream.push(byte)
            out.append(piece)
            if hit:
                break
        return out, stream

    streamed, stream = pieces(FailingRustTokenizer())
    assert not stream.in_rust and failed_at in caplog.text
    assert "".join(streamed) == "héllo → 世界, "
    assert streamed == pieces(ByteTokenizer())[0]
