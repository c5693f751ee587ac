"""`vllm` engine kind: vLLM's async engine in this process, behind the Engine protocol.

Contexts are token-id lists held here: Fill tokenizes (vLLM's tokenizer) and appends, a fork
copies the parent's ids, Generate submits the context's ids as a `prompt_token_ids` prompt and
appends the generated ids. vLLM's automatic prefix caching keeps the shared prefix's KV on the
GPU, so a forked context's prefill is served from cache; tensor parallelism and everything else
are vLLM's own (`tensor_parallel_size`, `engine_args`). Importing this module never imports
vllm; building the engine does, and without the package says so in one line.

Params: model (required), tensor_parallel_size (1), gpu_memory_utilization (0.9),
max_model_len (the model's), dtype ("auto"), enable_prefix_caching (true), kv_cache_tokens
(the manager's budget for cached prefix contexts; default 64 × max_model_len), engine_args
(more AsyncEngineArgs fields, passed as they are).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any
from collections.abc import AsyncIterator, Callable, Mapping

from parrot.chat import ChatTemplate
from parrot.engines.protocol import (Engine, EngineInfo, EngineStats, FillRequest, FillResult,
                                     GenerateChunk, GenerateRequest)
from parrot.engines.aborted import AbortedGenerates
from parrot.engines.tpot import TpotMeter
from parrot.errors import (EngineConfigError, EngineUnavailableError, PromptTooLongError,
                           UnknownContextError)
from parrot.extras import missing_extra
from parrot.constraints import Constraint, JsonObject, JsonSchema, Regex
from parrot.sampling import SamplingParams
from parrot.validation import Checks

BLOCK_SIZE = 16
_TOKENIZE_INLINE_CHARS = 4096  # longer texts are tokenized in a worker thread
_CHECK = Checks("vllm engine", EngineConfigError)


@dataclass(frozen=True)
class VLLMEngineConfig:
    model: str
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    dtype: str = "auto"
    enable_prefix_caching: bool = True
    kv_cache_tokens: int | None = None
    engine_args: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _CHECK.require(isinstance(self.model, str) and bool(self.model), "model", self.model,
                       "a model name or folder")
        _CHECK.positive_int("tensor_parallel_size", self.tensor_parallel_size)
        for key in ("max_model_len", "kv_cache_tokens"):
            _CHECK.positive_int(key, getattr(self, key), optional=True)
        _CHECK.mapping("engine_args", self.engine_args)

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any]) -> VLLMEngineConfig:
        _CHECK.keys(params, cls.__dataclass_fields__, required=("model",))
        return cls(**params)


class VLLMEngine(Engine):
    def __init__(self, name: str, config: VLLMEngineConfig, llm: Any,
                 to_vllm_sampling: Callable[[SamplingParams], Any] | None = None) -> None:
        self.name, self.config = name, config
        self._llm = llm
        self._to_vllm_sampling = to_vllm_sampling or _vllm_sampling
        self._tokenizer: Any = None
        self._max_model_len = config.max_model_len or 0  # the model's, read in start()
        self._contexts: dict[str, list[int]] = {}
        self._requests = itertools.count()
        self._num_running = 0
        self._tpot = TpotMeter()   # time per output token as Generates are handed over
        # Generates aborted by their callers, and the tokens vLLM had handed over for them
        # (a step's output still in vLLM's queue when the abort came is not seen)
        self._aborted = AbortedGenerates()

    async def start(self) -> None:
        if self._tokenizer is None:
            self._tokenizer = await _maybe_await(self._llm.get_tokenizer())
        if not self._max_model_len:
            model_config = await _maybe_await(self._llm.get_model_config())
            self._max_model_len = int(model_config.max_model_len)

    async def close(self) -> None:
        shutdown = getattr(self._llm, "shutdown", None)
        if shutdown is not None:
            shutdown()

    async def info(self) -> EngineInfo:
        return EngineInfo(self.name, "vllm", self.config.model, self._max_model_len, BLOCK_SIZE,
                          self._kv_tokens // BLOCK_SIZE,
                          ChatTemplate.from_tokenizer(self._tokenizer),
                          takes_prompt_in_generate=True)

    @property
    def _kv_tokens(self) -> int:
        return self.config.kv_cache_tokens or 64 * self._max_model_len

    async def healthz(self) -> bool:
        try:
            await self._llm.check_health()
        except Exception:  # noqa: BLE001 - any failure of the check means unhealthy
            return False
        return True

    async def fill(self, request: FillRequest) -> FillResult:
        ids = list(request.token_ids) if request.token_ids is not None \
            else await self._tokenize(request.text or "")
        context = self._open(request.context_id, request.parent_context_id) + ids
        if len(context) > self._max_model_len:
            raise PromptTooLongError(f"context {request.context_id!r} would hold {len(context)} "
                                     f"tokens; the model takes {self._max_model_len}")
        self._contexts[request.context_id] = context
        return FillResult(request.context_id, len(ids), len(context))

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        prompt_len = await self.fill_prompt(request)   # (it gets the whole text anyway)
        context = self._open(request.context_id, request.parent_context_id)
        self._contexts[request.context_id] = context
        request_id = f"{self.name}-{next(self._requests)}"
        text_len = ids_len = 0
        finished = False
        timer = self._tpot.timer()
        self._num_running += 1
        try:
            async for output in self._llm.generate({"prompt_token_ids": list(context)},
                                                   self._to_vllm_sampling(request.sampling),
                                                   request_id):
                sample = output.outputs[0]
                new_ids = list(sample.token_ids[ids_len:])
                piece = sample.text[text_len:]
                ids_len, text_len = len(sample.token_ids), len(sample.text)
                if request.context_id in self._contexts:
                    self._contexts[request.context_id].extend(new_ids)
                finished = output.finished
                reason = sample.finish_reason if finished else None
                chunk = GenerateChunk(piece, tuple(new_ids),
                                      (reason or "stop") if finished else None, prompt_len)
                prompt_len = None
                timer.observe(chunk)
                yield chunk
        except (asyncio.CancelledError, GeneratorExit):
            if not finished:   # closed after its last chunk: it finished, nothing thrown away
                self._aborted.add(ids_len)
            await self._llm.abort(request_id)
            raise
        except Exception as exc:  # noqa: BLE001 - vLLM's engine errors: the engine is gone
            if isinstance(exc, EngineUnavailableError):
                raise
            raise EngineUnavailableError(f"vllm engine {self.name!r}: {exc!r}") from exc
        finally:
            self._num_running -= 1

    async def free_context(self, context_id: str) -> None:
        if self._contexts.pop(context_id, None) is None:
            raise UnknownContextError(f"unknown context {context_id!r}")

    def context_tokens(self, context_id: str) -> list[int] | None:
        """The token ids a context holds here (its next Generate's prompt), or None."""
        tokens = self._contexts.get(context_id)
        return None if tokens is None else list(tokens)

    async def reset_prefix_cache(self) -> int:
        """vLLM's own `reset_prefix_cache` (it frees every cached block no request holds); vLLM
        does not say how many, so this answers 0."""
        await _maybe_await(self._llm.reset_prefix_cache())
        return 0

    async def stats(self) -> EngineStats:
        tokens = sum(len(c) for c in self._contexts.values())
        total = self._kv_tokens // BLOCK_SIZE
        return EngineStats(self._num_running, 0, total,
                           max(total - -(-tokens // BLOCK_SIZE), 0), BLOCK_SIZE, tokens,
                           len(self._contexts),
                           counters={**self._tpot.counters(), **self._aborted.counters()})

    def _open(self, context_id: str, parent_id: str | None) -> list[int]:
        if context_id in self._contexts:
            return self._contexts[context_id]
        if parent_id is None:
            return []
        if parent_id not in self._contexts:
            raise UnknownContextError(f"unknown parent context {parent_id!r}")
        return list(self._contexts[parent_id])

    async def _tokenize(self, text: str) -> list[int]:
        def encode() -> list[int]:
            return list(self._tokenizer(text, add_special_tokens=False).input_ids)
        return encode() if len(text) <= _TOKENIZE_INLINE_CHARS else await asyncio.to_thread(encode)


def _vllm_sampling(sampling: SamplingParams) -> Any:
    from vllm import SamplingParams as VSamplingParams

    return VSamplingParams(n=1, max_tokens=sampling.max_tokens, temperature=sampling.temperature,
                           top_p=sampling.top_p, top_k=sampling.top_k or -1, seed=sampling.seed,
                           stop=list(sampling.stop) or None,
                           stop_token_ids=list(sampling.stop_token_ids) or None,
                           ignore_eos=sampling.ignore_eos,
                           **_vllm_constraint(sampling.constraint))


def _vllm_constraint(constraint: Constraint | None) -> dict[str, Any]:
    """A constraint as vLLM's structured-output params: `structured_outputs=` (vLLM >= 0.10.2)
    or `guided_decoding=` (older), with the same fields (json, json_object, regex, choice)."""
    if constraint is None:
        return {}
    fields: dict[str, Any]
    if isinstance(constraint, JsonSchema):
        fields = {"json": constraint.schema}
    elif isinstance(constraint, JsonObject):
        fields = {"json_object": True}
    elif isinstance(constraint, Regex):
        fields = {"regex": constraint.pattern}
    else:
        fields = {"choice": list(constraint.choices)}
    try:
        from vllm.sampling_params import StructuredOutputsParams
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(**fields)}
    return {"structured_outputs": StructuredOutputsParams(**fields)}


def create_vllm_engine(name: str, params: Mapping[str, Any]) -> VLLMEngine:
    """Build the engine (loads the model: blocking, as the builtin engine's build is)."""
    config = VLLMEngineConfig.from_mapping(params)
    try:
        from vllm import AsyncEngineArgs, AsyncLLMEngine
    except ImportError as exc:
        raise missing_extra("vllm", f"engine {name!r} (kind vllm)", exc) from None
    args = {"model": config.model, "tensor_parallel_size": config.tensor_parallel_size,
            "gpu_memory_utilization": config.gpu_memory_utilization, "dtype": config.dtype,
            "enable_prefix_caching": config.enable_prefix_caching, **config.engine_args}
    if config.max_model_len is not None:
        args["max_model_len"] = config.max_model_len
    return VLLMEngine(name, config, AsyncLLMEngine.from_engine_args(AsyncEngineArgs(**args)))


async def _maybe_await(value: Any) -> Any:
    """vLLM's getters are coroutines in some versions and plain calls in others."""
    return await value if asyncio.iscoroutine(value) else value
