"""Launching a compiled Triton kernel again without the JIT's per-call work.

`fn[grid](*args, **kw)` costs ~40 us of host time on an H200 machine (triton 3.6: the binder,
a specialisation of every argument, the cache key, the launcher), against ~15 us for the
launcher alone. A mixed step's attention runs eagerly between its piecewise graphs, four
such launches a layer: 128 of them for LLaMA-7B, ~5 ms, in a step whose enqueue (10.55 ms,
docs/results/engine_mixed_h200.md) outlasted its 8.25 ms of GPU work. The same launches
repeat layer after layer and step after step with the same integers (shapes, strides, the
plan) and only other tensors.

`LaunchCache(fn)(grid, *args, **kw)` launches as `fn[grid](*args, **kw)` does; the compiled
kernel it gets back is kept under a key that determines Triton's specialisation: every
non-tensor argument by type and value (exact values: finer than Triton's "== 1" and
"divisible by 16"), every tensor by dtype, device and 16-byte alignment of its address (what
Triton specialises a pointer on), and the keyword arguments (constexprs, warps, stages). A later
call with an equal key calls the kept kernel's launcher directly with the new tensors, as
the JIT would after finding it in its own cache. Where the JIT gives no compiled kernel back
(the interpreter: `TRITON_INTERPRET=1`), or with `PARROT_KERNELS_DIRECT_LAUNCH=0` in the
environment (an A/B of the launch path; a Triton whose launcher takes other arguments), every
call takes the JIT's path.

`recording()` / `Recording.replay` go one step further for work that repeats exactly: the
launches a set of wrapper calls made, made again with some tensors swapped and none of the
wrappers' Python (the engine's attention, layer after layer of one step). Measured on the
H200 (docs/ENGINE.md "Launches"): a gpts-like mixed step's enqueue 12.33 ms through the JIT,
8.61 ms direct on the same host, 5.5-6.0 ms with the replays.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

DIRECT_LAUNCH = os.environ.get("PARROT_KERNELS_DIRECT_LAUNCH", "1") != "0"

# Distinct specialisations kept per kernel before the oldest half is dropped: a serving
# engine meets a few hundred (decode buckets x plans, prefill tiles), a bound keeps a
# long-running process from growing on shapes it never meets again.
MAX_ENTRIES = 4096


@dataclass(frozen=True)
class _Kept:
    kernel: Any                 # triton CompiledKernel
    tail: tuple[Any, ...]       # the parameters after the positional ones, in order


def _arg_key(arg: object) -> object:
    if isinstance(arg, torch.Tensor):   # the device too: a compiled kernel is loaded per GPU
        return (arg.dtype, arg.get_device(), arg.data_ptr() % 16 == 0)
    return (type(arg), arg)


class LaunchCache:
    """A Triton JIT function's launches, specialisations kept by exact argument key."""

    def __init__(self, fn: Any, *, max_entries: int = MAX_ENTRIES,
                 runtime: Callable[[], Runtime] | None = None,
                 direct: bool | None = None) -> None:
        self.fn = fn
        self.direct = DIRECT_LAUNCH if direct is None else direct
        self._runtime = runtime or triton_runtime
        self.max_entries = max_entries
        self._kept: dict[tuple[object, ...], _Kept] = {}
        self.num_direct = 0       # launches that skipped the JIT
        self.num_jit = 0          # launches through it
        params = inspect.signature(getattr(fn, "fn", fn)).parameters
        self._names = list(params)
        self._defaults = {n: p.default for n, p in params.items()
                          if p.default is not inspect.Parameter.empty}

    def __call__(self, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> None:
        seen = getattr(_active, "specialisations", None)
        if seen is not None:        # a dry run (`specialisations()`): note it, launch nothing
            seen.add(specialisation(self.fn, args, kwargs))
            return
        if (getattr(_active, "only", None) is not None
                and not launches_now(specialisation(self.fn, args, kwargs))):
            return                  # `launching_only`: another specialisation, not launched
        key = (tuple(_arg_key(a) for a in args), tuple((k, type(v), v)
                                                     for k, v in kwargs.items()))
        kept = self._kept.get(key)
        if kept is None:
            self.num_jit += 1
            kernel = self.fn[grid](*args, **kwargs)
            if self.direct and _launchable(kernel):
                kept = self._keep(key, kernel, args, kwargs)
        else:
            self.num_direct += 1
            _launch(kept, grid, args, self._runtime())
        rec = getattr(_active, "recording", None)
        if rec is not None:
            rec._add(kept, grid, args, self._runtime)

    def _keep(self, key: tuple[object, ...], kernel: Any, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> _Kept:
        if len(self._kept) >= self.max_entries:
            for old in list(self._kept)[:self.max_entries // 2]:
                del self._kept[old]
        tail = tuple(kwargs[n] if n in kwargs else self._defaults[n]
                     for n in self._names[len(args):])
        kept = self._kept[key] = _Kept(kernel, tail)
        return kept


_active = threading.local()
_replayed = [0]       # launches made by replays, process-wide (launch_counts)


def _same_layout(old: torch.Tensor, new: torch.Tensor) -> bool:
    """Whether `new` may stand in for `old` in a launch: every integer a wrapper derives from a
    tensor (shape, strides) and everything Triton specialises it on are equal."""
    return (new.shape == old.shape and new.stride() == old.stride() and new.dtype == old.dtype
            and new.device == old.device and new.data_ptr() % 16 == old.data_ptr() % 16)


class Recording:
    """The launches some kernel wrapper calls made (`recording()`), to make again with some of
    their tensors swapped: a step's attention recorded at its first layer and replayed at
    every other with that layer's caches, query and output, without the wrappers' Python
    (argument checks, plans, the launch key) or the JIT's.

    `replay(old, new)` swaps each tensor argument that *is* one of `old` for the `new` one at
    the same index. It declines (returns False, launching nothing) when a launch went
    through the interpreter or was not kept, when a new tensor's layout differs from the old
    one's, or when a launch took a view of an old tensor's memory that is not itself one of
    `old` (a view made inside the wrapper: its replacement cannot be known). A tensor a
    wrapper allocated (a workspace) is reused by every replay: the launches run in stream
    order, each layer's after the last. The wrapper must compute nothing else from the old
    tensors' values (the kernels' wrappers read only shapes, strides and host metadata)."""

    def __init__(self) -> None:
        self._launches: list[tuple[_Kept, tuple[int, ...], tuple[Any, ...],
                                   Callable[[], Runtime]]] = []
        self._complete = True
        self._old: tuple[torch.Tensor, ...] | None = None
        self._swaps: list[list[tuple[int, int]]] = []
        self.num_replays = 0

    def _add(self, kept: _Kept | None, grid: tuple[int, ...], args: tuple[Any, ...],
             runtime: Callable[[], Runtime]) -> None:
        if kept is None:
            self._complete = False
        else:
            self._launches.append((kept, grid, args, runtime))

    @property
    def num_launches(self) -> int:
        return len(self._launches)

    def _plan(self, old: tuple[torch.Tensor, ...]) -> bool:
        storages = {t.untyped_storage().data_ptr() for t in old}
        self._swaps = []
        for _, _, args, _ in self._launches:
            swaps = []
            for i, arg in enumerate(args):
                which = next((j for j, t in enumerate(old) if arg is t), None)
                if which is not None:
                    swaps.append((i, which))
                elif (isinstance(arg, torch.Tensor)
                      and arg.untyped_storage().data_ptr() in storages):
                    return False
            self._swaps.append(swaps)
        self._old = old
        return True

    def replay(self, old: tuple[torch.Tensor, ...], new: tuple[torch.Tensor, ...]) -> bool:
        if not self._complete or not self._launches or len(old) != len(new):
            return False
        if self._old is None or any(a is not b for a, b in zip(self._old, old)):
            if not self._plan(old):
                self._complete = False
                return False
        if not all(_same_layout(o, n) for o, n in zip(old, new)):
            return False
        for (kept, grid, args, runtime), swaps in zip(self._launches, self._swaps):
            if swaps:
                changed = list(args)
                for i, which in swaps:
                    changed[i] = new[which]
                args = tuple(changed)
            _launch(kept, grid, args, runtime())
        self.num_replays += 1
        _replayed[0] += len(self._launches)
        return True


@contextlib.contextmanager
def _on_this_thread(name: str, value: object) -> Iterator[None]:
    """`_active.<name>` set to `value` while inside (the outer one's back after)."""
    outer = getattr(_active, name, None)
    setattr(_active, name, value)
    try:
        yield
    finally:
        setattr(_active, name, outer)


@contextlib.contextmanager
def recording() -> Iterator[Recording]:
    """Record the launches made through any LaunchCache on this thread while inside."""
    rec = Recording()
    with _on_this_thread("recording", rec):
        yield rec


def _specialised(arg: object) -> object:
    """What Triton compiles a kernel argument into: a tensor by dtype and 16-byte alignment,
    an integer by its value being 1, a multiple of 16 and 32-bit (triton 3.x specialises on
    the first two and types by the third), a float not at all, anything else by value. At
    least as fine as Triton's own key, so equal keys never need two compilations."""
    if isinstance(arg, torch.Tensor):
        return (arg.dtype, arg.data_ptr() % 16 == 0)
    if isinstance(arg, bool):
        return ("bool", arg)
    if isinstance(arg, int):
        return ("int", arg == 1, arg % 16 == 0, -2 ** 31 <= arg < 2 ** 31)
    if isinstance(arg, float):
        return ("float",)
    return (type(arg), arg)


def specialisation(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[object, ...]:
    """The compiled kernel a launch of `fn` with these arguments uses (`_specialised`; the
    keyword arguments -- constexprs, warps, stages -- by value)."""
    name = getattr(getattr(fn, "fn", fn), "__qualname__", repr(fn))
    return (name, tuple(_specialised(a) for a in args),
            tuple(sorted((k, type(v).__name__, v) for k, v in kwargs.items())))


@contextlib.contextmanager
def specialisations() -> Iterator[set[tuple[object, ...]]]:
    """A dry run: the kernel wrappers called on this thread inside plan their launches as
    always, but no launch is made (nothing compiles, nothing runs); the set yielded gets the
    `specialisation` of each. Which of many shapes compile distinct kernels, found in
    microseconds a shape (cuda/precompile.py)."""
    seen: set[tuple[object, ...]] = set()
    with _on_this_thread("specialisations", seen):
        yield seen


@contextlib.contextmanager
def launching_only(specs: set[tuple[object, ...]]) -> Iterator[None]:
    """Only the launches whose `specialisation` is one of `specs` are made on this thread
    inside; the others are skipped (their outputs are not written). Compiling exactly these
    kernels through the wrappers that launch them, and no other (cuda/precompile.py: each
    worker compiles its own share of specialisations)."""
    with _on_this_thread("only", specs):
        yield


def launches_now(spec: tuple[object, ...]) -> bool:
    """Whether a launch of `spec` (a `specialisation`) is really made on this thread now: not
    inside a dry run (`specialisations`), and one `launching_only` allows."""
    if getattr(_active, "specialisations", None) is not None:
        return False
    only = getattr(_active, "only", None)
    return only is None or spec in only


_caches: dict[int, LaunchCache] = {}


def launcher(fn: Any) -> LaunchCache:
    """The one LaunchCache of a JIT function (kernels are module-level: they live as long)."""
    cache = _caches.get(id(fn))
    if cache is None:
        cache = _caches[id(fn)] = LaunchCache(fn)
    return cache


def launch_counts() -> tuple[int, int, int]:
    """(direct launches, launches replayed from a Recording, launches through the JIT) of
    every kernel in this process."""
    return (sum(c.num_direct for c in _caches.values()), _replayed[0],
            sum(c.num_jit for c in _caches.values()))


def _launchable(kernel: object) -> bool:
    return all(hasattr(kernel, a) for a in ("run", "function", "packed_metadata",
                                             "launch_metadata"))


@dataclass(frozen=True)
class Runtime:
    """Where a direct launch goes: the current stream, and the launch hooks (profilers)."""

    stream: Callable[[], Any]
    hooks: Callable[[], tuple[Any, Any]]


@functools.cache
def triton_runtime() -> Runtime:
    """Triton's own: the stream and hooks its JIT launches with (imported on first use)."""
    from triton import knobs
    from triton.runtime import driver

    return Runtime(
        stream=lambda: driver.active.get_current_stream(driver.active.get_current_device()),
        hooks=lambda: (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook))


def _launch(kept: _Kept, grid: tuple[int, ...], args: tuple[Any, ...], runtime: Runtime
            ) -> None:
    """What the JIT does with a kernel found in its cache: the launcher, on the current
    stream, with every parameter in order (the launcher skips the constexprs)."""
    kernel, full = kept.kernel, args + kept.tail
    stream = runtime.stream()
    enter, leave = runtime.hooks()
    meta = kernel.launch_metadata(grid, stream, *full) if enter is not None else None
    g1 = grid[1] if len(grid) > 1 else 1
    g2 = grid[2] if len(grid) > 2 else 1
    kernel.run(grid[0], g1, g2, stream, kernel.function, kernel.packed_metadata, meta, enter,
               leave, *full)
