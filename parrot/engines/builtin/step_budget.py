"""Stall-free batching: how many prefill tokens one step may carry beside its decode rows.

A decode row is one user's next token: a step that also prefills P tokens delays every running
stream by the prefill's time. The batch scheduler schedules the decodes first, then asks
`StepBudget.prefill_tokens` how many prefill tokens may join them, and splits longer prompts
into chunks of at most that many (chunked prefill, as vLLM and Sarathi-Serve do), so a long
prompt is spread over several steps instead of stalling every stream for its whole prefill.

The rule, per step (decode rows D over K context tokens):
* no decode rows: nobody's stream waits on the step, the prefill takes `max_batch_tokens`;
* a fixed budget (`step_token_budget: N`): decodes and prefill together at most N tokens;
* `step_token_budget: auto` with a speed profile (the one the engine measured at start-up,
  startup_probe.py): the step is priced as the profile's decode step over K tokens plus the
  profile's cost per prefilled token, and the prefill gets what keeps that under
  `itl_target_ms`. A larger decode batch (more KV to read) leaves less room, so the chunk
  shrinks as load grows, which is when a stall hurts the most streams;
* `auto` without a profile (the CPU, where the probe is off by default, or a failed probe): the
  old rule, `max_batch_tokens` per step, since there is nothing to price a step with;
* whatever the rule, the prefill gets at least `MIN_PREFILL_TOKENS` beside decodes (fewer if
  `max_batch_tokens` or a smaller fixed budget leaves fewer), so prompts never starve behind a
  decode batch that alone is over the target; such a step runs over the target by that small
  chunk's cost.

The price leaves out what mixing itself costs. The profile's decode step is a decode graph's,
launched ahead of the host's work (lookahead.py); a step that mixes in a prefill chunk runs
through the piecewise graphs or eagerly and is never launched ahead, so on an H200 with 250
LLaMA-7B rows a mixed iteration ran ~20 ms past its price (docs/results/serving_h200.md).
Learning that overrun and taking it out of the prefill (tried: an exponentially weighted mean
of each mixed iteration's overrun) kept the iterations near the target but, since the
overrun is a fixed cost per mixed step, split the same prefill over ~1.6x as many mixed
steps: 13% fewer output tokens a second at 256 in flight, with the same ITL p99. The fixed
cost has to go from the mixed step itself, not be priced in.

No torch here: the scheduler's unit tests build budgets without a model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from parrot.speed_profile import SpeedProfile

# The least prefill a step with decode rows carries. A smaller chunk pays a whole decode step
# (the weights read once more) for little prefill progress; 64 tokens cost ~1.5 ms of prefill on
# an H200 with LLaMA-7B (the probe's 0.023 ms/token), a small overrun of a step that is over
# its ITL target anyway.
MIN_PREFILL_TOKENS = 64

# The default ITL target: 50 ms a token is 20 tokens/s, faster than anyone reads a stream, and
# 2.5x the ~20-ms decode step of 256 LLaMA-7B rows on an H200, so a mixed step stays within
# the 3x of a decode step that the ITL p99 / p50 asks for.
DEFAULT_ITL_TARGET_MS = 50.0


@dataclass(frozen=True)
class StepBudget:
    """The prefill a step may carry beside its decode rows (see the module docstring)."""

    max_batch_tokens: int                    # the hard cap of any step (decodes count one)
    step_tokens: int | None = None           # a fixed budget of a step with decode rows
    itl_target_ms: float = DEFAULT_ITL_TARGET_MS   # `auto`: the step time to stay under
    profile: SpeedProfile | None = None      # `auto`: what a step costs (None: unpriced)
    min_prefill_tokens: int = MIN_PREFILL_TOKENS

    def __post_init__(self) -> None:
        if self.max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be >= 1, got {self.max_batch_tokens}")
        if self.step_tokens is not None and self.step_tokens < 1:
            raise ValueError(f"step_tokens must be >= 1, got {self.step_tokens}")
        if not self.itl_target_ms > 0:
            raise ValueError(f"itl_target_ms must be > 0, got {self.itl_target_ms}")

    def with_profile(self, profile: SpeedProfile | None) -> StepBudget:
        """The same budget priced with `profile` (the engine's measured speed)."""
        return replace(self, profile=profile)

    @property
    def mode(self) -> str:
        """"fixed" (step_tokens), "itl" (auto with a profile) or "unbounded" (auto without)."""
        if self.step_tokens is not None:
            return "fixed"
        return "itl" if self.profile is not None else "unbounded"

    def prefill_tokens(self, decode_rows: int, decode_kv_tokens: int) -> int:
        """Prefill tokens a step may add to `decode_rows` decode rows that attend
        `decode_kv_tokens` context tokens in all."""
        room = max(0, self.max_batch_tokens - decode_rows)
        if decode_rows == 0:
            return room
        floor = self.min_prefill_tokens
        if self.step_tokens is not None:
            allowed = self.step_tokens - decode_rows
            floor = min(floor, self.step_tokens)    # a budget below the floor is kept
        elif self.profile is not None:
            spare_ms = self.itl_target_ms - self.profile.decode_ms(decode_kv_tokens)
            per_token = self.profile.prefill_ms_per_token
            allowed = room if per_token <= 0 else int(spare_ms / per_token)
        else:
            return room
        return min(room, max(allowed, floor))

    def describe(self, kv_points: tuple[int, ...] = (0, 16384, 65536, 131072)) -> str:
        """One line for the start-up log: the rule, and under `auto` the prefill tokens a step
        beside one decode row gets at a few KV loads."""
        if self.mode == "fixed":
            return (f"step token budget {self.step_tokens} (decodes + prefill; prefill alone "
                    f"up to {self.max_batch_tokens})")
        if self.mode == "unbounded":
            return (f"step token budget: auto without a speed profile, so {self.max_batch_tokens} "
                    "tokens per step (max_batch_tokens)")
        points = ", ".join(f"{self.prefill_tokens(1, kv)} at {kv} KV tokens" for kv in kv_points)
        return (f"step token budget: auto, ITL target {self.itl_target_ms:g} ms: prefill tokens "
                f"beside decodes {points} (alone up to {self.max_batch_tokens})")
