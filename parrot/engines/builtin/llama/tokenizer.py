"""A model folder's tokenizer, loaded without transformers where that gives the same tokens.

`import transformers` takes seconds (8.5 s on an H200 host), longer than the rest of a warm
engine start, and a tokenizer loading in a background thread holds the GIL the graph capture
needs. Most tokenizers shipped today are a `tokenizer.json` that transformers hands to the
Rust `tokenizers` library as is; for those (`direct_tokenizer`) the engine uses
`FastTokenizer`, which exposes the part of a transformers tokenizer the engine calls:
`tok(text, add_special_tokens=...).input_ids`, `decode`, `len`, the bos/eos tokens and ids, the
chat template and `backend_tokenizer`. Where transformers would change the pipeline
tokenizer.json describes (a class of its own, `add_bos_token`, extra special tokens, space
clean-up, ...), the transformers tokenizer is loaded instead, in a background thread
(`TokenizerLoad`), and checked on first use against the facts the build went by.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parrot.chat import config_token, token_text

log = logging.getLogger(__name__)

# tokenizer classes whose transformers tokenizer is tokenizer.json as is (transformers 5's
# generic class and the 4.x one it replaced); model-specific classes may rebuild it
DIRECT_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})
# tokenizer_config.json settings with which transformers rewrites what tokenizer.json says
_REWRITING_KEYS = ("add_bos_token", "add_eos_token", "add_prefix_space", "legacy", "from_slow",
                   "fix_mistral_regex")
_TRUTHY_REWRITING_KEYS = ("split_special_tokens", "clean_up_tokenization_spaces")
_NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token",
                 "mask_token")
_EXTRA_TOKEN_KEYS = ("additional_special_tokens", "extra_special_tokens")
_MISTRAL_REGEX_VOCAB = 100_000   # transformers patches mistral pre-tokenizers above this


@dataclass(frozen=True)
class Encoding:
    input_ids: list[int]


class FastTokenizer:
    """A tokenizer.json on the `tokenizers` library, with tokenizer_config.json's special tokens
    and chat template: what transformers gives for the same folder when `direct_tokenizer`
    says yes (tests compare the two)."""

    clean_up_tokenization_spaces = False   # direct only when the config does not ask for it

    def __init__(self, backend: Any, config: Mapping[str, Any],
                 chat_template: str | dict[str, str] | None) -> None:
        self.backend_tokenizer = backend
        self.chat_template = chat_template
        self.bos_token = config_token(config, "bos_token")
        self.eos_token = config_token(config, "eos_token")
        self.bos_token_id = self._id(self.bos_token)
        self.eos_token_id = self._id(self.eos_token)

    @classmethod
    def from_folder(cls, folder: Path, config: Mapping[str, Any] | None = None
                    ) -> FastTokenizer:
        """`config`: the folder's tokenizer_config.json when read already."""
        from tokenizers import Tokenizer

        backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
        backend.no_truncation()   # transformers encodes whole texts unless asked otherwise
        backend.no_padding()
        if config is None:
            config = _read_json(folder / "tokenizer_config.json")
        return cls(backend, config, _chat_template(folder, config))

    def _id(self, token: str | None) -> int | None:
        return None if token is None else self.backend_tokenizer.token_to_id(token)

    def __len__(self) -> int:
        return int(self.backend_tokenizer.get_vocab_size(with_added_tokens=True))

    def __call__(self, text: str, add_special_tokens: bool = True) -> Encoding:
        return Encoding(self.backend_tokenizer.encode(
            text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(self.backend_tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))

    def json_text(self) -> str:
        """The tokenizer's serialization, as llguidance's tokenizer bridge takes it."""
        return str(self.backend_tokenizer.to_str())


def direct_tokenizer(folder: Path) -> FastTokenizer | str:
    """The folder's tokenizer on `tokenizers` alone, or why transformers is needed for it."""
    tokenizer, why_not = _direct(folder)
    if why_not is not None:
        return why_not
    assert tokenizer is not None
    return tokenizer


def _direct(folder: Path) -> tuple[FastTokenizer | None, str | None]:
    """(the folder's FastTokenizer where it was loaded, why transformers is needed: None when
    it is not); the tokenizer is loaded once, for the rules that read it."""
    if not (folder / "tokenizer.json").is_file():
        return None, "no tokenizer.json"
    config_path = folder / "tokenizer_config.json"
    if not config_path.is_file():
        return None, "no tokenizer_config.json"
    config = _read_json(config_path)
    kind = config.get("tokenizer_class")
    if kind not in DIRECT_CLASSES:
        return None, f"tokenizer_class {kind!r} is not one of {sorted(DIRECT_CLASSES)}"
    rewriting = [key for key in _REWRITING_KEYS if key in config] + [
        key for key in _TRUTHY_REWRITING_KEYS if config.get(key)]
    if rewriting:
        return None, f"tokenizer_config.json sets {', '.join(rewriting)}"
    tokenizer = FastTokenizer.from_folder(folder, config)
    backend = tokenizer.backend_tokenizer
    if backend.post_processor is None:
        return tokenizer, "tokenizer.json has no post-processor (transformers would write one)"
    missing = _tokens_missing(config, backend.get_added_tokens_decoder())
    if missing:
        return tokenizer, f"special tokens transformers would add: {', '.join(missing)}"
    if len(tokenizer) > _MISTRAL_REGEX_VOCAB and "mistral" in str(
            _read_json(folder / "config.json").get("model_type", "")).lower():
        return tokenizer, "a mistral tokenizer (transformers may patch its pre-tokenizer)"
    return tokenizer, None


def _tokens_missing(config: Mapping[str, Any], added: Mapping[int, Any]) -> list[str]:
    """Tokens the config names that tokenizer.json lacks as added tokens (transformers adds
    them, so the vocabulary would differ), and config entries whose id or special flag
    tokenizer.json says otherwise."""
    by_text = {token.content: token for token in added.values()}
    missing: list[str] = []
    for index, entry in dict(config.get("added_tokens_decoder") or {}).items():
        have = added.get(int(index))
        if have is None or have.content != entry.get("content") or have.special != bool(
                entry.get("special", False)):
            missing.append(str(entry.get("content")))
    named = [config_token(config, key) for key in _NAMED_TOKENS]
    for key in _EXTRA_TOKEN_KEYS:
        extra = config.get(key) or []
        named.extend(token_text(value) for value in (
            extra.values() if isinstance(extra, Mapping) else extra))
    for text in named:
        if text is not None and (text not in by_text or not by_text[text].special):
            missing.append(text)
    return missing


def _chat_template(folder: Path, config: Mapping[str, Any]) -> str | dict[str, str] | None:
    """As transformers reads it: chat_template.jinja over the config's entry; a list of named
    templates becomes a dict."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    value = config.get("chat_template")
    if isinstance(value, list):
        return {entry["name"]: entry["template"] for entry in value}
    return value if isinstance(value, str) else None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    value = json.loads(path.read_text(encoding="utf-8"))
    return value if isinstance(value, dict) else {}


def load_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


@dataclass(frozen=True)
class TokenizerFacts:
    """What building an engine needs from its tokenizer, read from the tokenizer's files by the
    `tokenizers` library in a fraction of a second: the vocabulary with its added tokens
    (what `len(tokenizer)` says) and the EOS token's id (tokenizer_config.json's `eos_token`,
    as `tokenizer.eos_token_id` reads it)."""

    vocab_size: int
    eos_token_id: int | None


def tokenizer_facts(folder: Path, fast: FastTokenizer | None = None) -> TokenizerFacts | None:
    """None when the folder has no tokenizer.json (a slow tokenizer: load it to know).
    `fast`: the folder's tokenizer.json when loaded already."""
    if fast is None:
        if not (folder / "tokenizer.json").is_file():
            return None
        fast = FastTokenizer.from_folder(folder)
    return TokenizerFacts(len(fast), fast.eos_token_id)


class TokenizerLoad:
    """A transformers tokenizer loading in a thread of its own while the engine loads its
    weights and warms up; `result()` waits for it (the engine's first use, once built) and
    checks it against the facts the build went by."""

    def __init__(self, folder: Path, facts: TokenizerFacts) -> None:
        self.folder, self.facts = folder, facts
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenizer-load")
        self._future = pool.submit(load_tokenizer, folder)
        pool.shutdown(wait=False)           # the thread ends with its one task

    def result(self) -> Any:
        tokenizer = self._future.result()
        if len(tokenizer) != self.facts.vocab_size or (
                self.facts.eos_token_id is not None
                and tokenizer.eos_token_id != self.facts.eos_token_id):
            raise RuntimeError(
                f"the tokenizer in {self.folder} has {len(tokenizer)} tokens and EOS "
                f"{tokenizer.eos_token_id}; its files said {self.facts.vocab_size} and "
                f"{self.facts.eos_token_id}")
        return tokenizer


def start_tokenizer(folder: Path) -> tuple[Any, int, tuple[int, ...]]:
    """(the tokenizer or its TokenizerLoad, its vocabulary size, the EOS ids): on `tokenizers`
    alone where that is the same tokenizer, else transformers' loading in the background when
    the files tell the size and EOS, else loaded here."""
    fast, why_not = _direct(folder)
    if fast is not None and why_not is None:
        return fast, len(fast), eos_ids(folder, fast)
    log.info("tokenizer in %s loads through transformers: %s", folder, why_not)
    facts = tokenizer_facts(folder, fast)
    if facts is None:
        tokenizer = load_tokenizer(folder)
        return tokenizer, len(tokenizer), eos_ids(folder, tokenizer)
    return TokenizerLoad(folder, facts), facts.vocab_size, eos_ids(folder, facts)


def eos_ids(folder: Path | None, tokenizer: Any | None) -> tuple[int, ...]:
    """EOS ids from generation_config.json (int or list) and the tokenizer (or anything with
    its `eos_token_id`: TokenizerFacts)."""
    ids: list[int] = []
    if folder is not None and (folder / "generation_config.json").is_file():
        value = json.loads((folder / "generation_config.json").read_text()).get("eos_token_id")
        ids.extend(value if isinstance(value, list) else [] if value is None else [value])
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    return tuple(dict.fromkeys(int(i) for i in ids))
