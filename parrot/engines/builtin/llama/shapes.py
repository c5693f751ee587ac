"""ModelShape: the hyper-parameters of a LLaMA-family model, and the named random-weight shapes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any
from collections.abc import Mapping


@dataclass(frozen=True)
class ModelShape:
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    head_dim: int = 0                 # 0: hidden_size // num_heads
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: Mapping[str, Any] = field(default_factory=dict)  # {"rope_type": ..., ...}
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of "
                             f"num_kv_heads={self.num_kv_heads}")

    @classmethod
    def from_hf_config(cls, cfg: Mapping[str, Any]) -> ModelShape:
        """From a LLaMA-family config.json (transformers 4.x and 5.x spellings)."""
        model_type = cfg.get("model_type", "llama")
        if model_type not in ("llama", "mistral", "qwen2"):
            raise ValueError(f"unsupported model_type {model_type!r}; the builtin engine runs "
                             "LLaMA-family models (llama, mistral, qwen2 without biases)")
        if cfg.get("attention_bias") or cfg.get("mlp_bias"):
            raise ValueError("attention/mlp biases are not supported by the builtin engine")
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        theta = rope.pop("rope_theta", None) or cfg.get("rope_theta", 10000.0)
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        rope["rope_type"] = rope_type
        rope.pop("type", None)
        num_heads = int(cfg["num_attention_heads"])
        return cls(
            num_layers=int(cfg["num_hidden_layers"]),
            hidden_size=int(cfg["hidden_size"]),
            num_heads=num_heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or num_heads),
            intermediate_size=int(cfg["intermediate_size"]),
            vocab_size=int(cfg["vocab_size"]),
            head_dim=int(cfg.get("head_dim") or 0),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
            rope_theta=float(theta),
            rope_scaling={} if rope_type == "default" else rope,
            max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        )

    def to_hf_config(self) -> dict[str, Any]:
        """The LlamaConfig kwargs of this shape (to build the HF model for comparisons)."""
        rope = {"rope_type": "default", **dict(self.rope_scaling), "rope_theta": self.rope_theta}
        return dict(
            num_hidden_layers=self.num_layers, hidden_size=self.hidden_size,
            num_attention_heads=self.num_heads, num_key_value_heads=self.num_kv_heads,
            intermediate_size=self.intermediate_size, vocab_size=self.vocab_size,
            head_dim=self.head_dim, rms_norm_eps=self.rms_norm_eps, rope_theta=self.rope_theta,
            rope_scaling=None if rope["rope_type"] == "default" else rope,
            max_position_embeddings=self.max_position_embeddings,
            tie_word_embeddings=self.tie_word_embeddings, attention_bias=False, mlp_bias=False,
            hidden_act="silu")

    def with_vocab(self, vocab_size: int) -> ModelShape:
        return replace(self, vocab_size=vocab_size)

    def num_parameters(self) -> int:
        """Weights of the model: embeddings (and an untied LM head), each layer's attention
        and MLP projections and its two norms, the final norm."""
        h, d = self.hidden_size, self.head_dim
        attention = h * (self.num_heads + 2 * self.num_kv_heads) * d + self.num_heads * d * h
        layer = attention + 3 * h * self.intermediate_size + 2 * h
        heads = 1 if self.tie_word_embeddings else 2
        return heads * self.vocab_size * h + self.num_layers * layer + h

    def projection_shapes(self) -> list[tuple[int, int]]:
        """(N, K) of each kind of linear layer a decode step runs, as the model fuses them
        (model.py: q/k/v in one, gate/up in one), then the LM head: what
        `LlamaModel.projection_weights` gives, known before the weights are loaded."""
        h, d = self.hidden_size, self.head_dim
        return [((self.num_heads + 2 * self.num_kv_heads) * d, h), (h, self.num_heads * d),
                (2 * self.intermediate_size, h), (h, self.intermediate_size),
                (self.vocab_size, h)]

    def kv_bytes_per_token(self, dtype_size: int) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_size

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


NAMED_SHAPES: dict[str, ModelShape] = {
    # Fast logic tests: GQA like SmolLM2, but two layers of width 64.
    "tiny": ModelShape(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
                       intermediate_size=128, vocab_size=512, rms_norm_eps=1e-5,
                       max_position_embeddings=2048),
    "llama-7b": ModelShape(num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=32,
                           intermediate_size=11008, vocab_size=32000, rms_norm_eps=1e-6,
                           max_position_embeddings=4096),
    "llama-13b": ModelShape(num_layers=40, hidden_size=5120, num_heads=40, num_kv_heads=40,
                            intermediate_size=13824, vocab_size=32000, rms_norm_eps=1e-6,
                            max_position_embeddings=4096),
}
