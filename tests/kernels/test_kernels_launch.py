"""LaunchCache: a kept kernel is relaunched directly only for an argument key that fixes
Triton's specialisation; on CUDA its launches compute what the JIT's do."""
import pytest
import torch

from parrot_kernels.launch import LaunchCache, Runtime

from .factories import poisoned_like, rel_err


def kernel(x, n, scale, y, BLOCK: int = 64, EVEN: bool = True):   # noqa: N803 (constexprs)
    """The signature of a fake JIT function's kernel."""


class FakeCompiled:
    def __init__(self, jit, key):
        self.jit, self.key = jit, key
        self.function, self.packed_metadata = f"function {key}", f"metadata {key}"

    def launch_metadata(self, grid, stream, *args):
        return ("metadata", grid, stream, args)

    def run(self, *call):
        self.jit.direct.append((self, call))


class FakeJit:
    """Compiles one kernel per call through the JIT path and records the direct launches."""

    fn = staticmethod(kernel)

    def __init__(self, compiled=True):
        self.compiles, self.direct, self.compiled = [], [], compiled

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.compiles.append((grid, args, kwargs))
            return FakeCompiled(self, len(self.compiles)) if self.compiled else None
        return run


def _cache(jit, hook=None, **kw):
    return LaunchCache(jit, runtime=lambda: Runtime(stream=lambda: "stream",
                                                    hooks=lambda: (hook, None)), **kw)


def _tensor(offset=0, dtype=torch.float16):
    return torch.zeros(64, dtype=dtype)[offset:]


def test_a_repeated_key_launches_the_kept_kernel_with_the_new_arguments():
    jit = FakeJit()
    cache = _cache(jit)
    x1, y1, x2, y2 = _tensor(), _tensor(), _tensor(), _tensor()
    cache((4,), x1, 7, 0.5, y1, BLOCK=32, num_warps=4)
    cache((9, 2), x2, 7, 0.5, y2, BLOCK=32, num_warps=4)
    assert len(jit.compiles) == 1 and cache.num_jit == 1 and cache.num_direct == 1
    (compiled, call), = jit.direct
    assert compiled.key == 1
    # grid, stream, the kept handles, no launch metadata without a hook, then every
    # parameter in order: the positional ones as given now, BLOCK as given, EVEN's default
    assert call[:9] == (9, 2, 1, "stream", "function 1", "metadata 1", None, None, None)
    assert call[9] is x2 and call[10:12] == (7, 0.5) and call[12] is y2
    assert call[13:] == (32, True)


@pytest.mark.parametrize("change", ["int", "type", "dtype", "alignment", "constexpr",
                                    "option"])
def test_a_key_that_may_specialise_differently_goes_through_the_jit(change):
    jit = FakeJit()
    cache = _cache(jit)
    cache((1,), _tensor(), 16, 0.5, _tensor(), BLOCK=32, num_warps=4)
    args = [_tensor(), 16, 0.5, _tensor()]
    kwargs = {"BLOCK": 32, "num_warps": 4}
    if change == "int":
        args[1] = 17                   # Triton specialises 16 (divisible) and 17 apart
    elif change == "type":
        args[1] = 16.0                 # equal as a key value, another Triton type
    elif change == "dtype":
        args[0] = _tensor(dtype=torch.float32)
    elif change == "alignment":
        args[0] = _tensor(offset=1)    # 2 bytes past a 16-byte boundary
    elif change == "constexpr":
        kwargs["BLOCK"] = 64
    else:
        kwargs["num_warps"] = 8
    cache((1,), *args, **kwargs)
    assert len(jit.compiles) == 2 and not jit.direct


def test_without_a_compiled_kernel_every_call_takes_the_jit():
    jit = FakeJit(compiled=False)          # the interpreter's JIT returns no kernel
    cache = _cache(jit)
    for _ in range(3):
        cache((1,), _tensor(), 1, 0.5, _tensor())
    assert len(jit.compiles) == 3 and not jit.direct and cache.num_direct == 0


def test_a_launch_hook_gets_the_launch_metadata():
    jit = FakeJit()
    cache = _cache(jit, hook="enter")
    x, y = _tensor(), _tensor()
    cache((3,), x, 1, 0.5, y)
    cache((3,), x, 1, 0.5, y)
    (_, call), = jit.direct
    assert call[6][:3] == ("metadata", (3,), "stream") and call[7] == "enter"


def test_the_cache_is_bounded():
    jit = FakeJit()
    cache = _cache(jit, max_entries=4)
    for n in range(6):
        cache((1,), _tensor(), n, 0.5, _tensor())
    cache((1,), _tensor(), 5, 0.5, _tensor())      # kept: among the newest
    cache((1,), _tensor(), 0, 0.5, _tensor())      # dropped with the oldest half
    assert len(jit.compiles) == 7 and len(jit.direct) == 1


@pytest.mark.gpu
def test_direct_launches_compute_what_the_jit_does_on_cuda():
    """Every layer of a step relaunches the attention kernels directly with other caches."""
    from parrot_kernels import reference_shared_prefix_decode_attention as reference
    from parrot_kernels import shared_prefix_decode_attention
    from parrot_kernels import _jit_decode as jit
    from parrot_kernels.launch import launcher

    from .factories import make_shared_batch

    partials = launcher(jit._decode_partial_kernel)
    before = partials.num_direct
    for seed in range(3):           # same shapes, new tensors (a new layer's caches)
        b = make_shared_batch(group_sizes=[1, 7, 16], prefix_blocks=[3, 0, 64],
                              suffix_lens=list(range(1, 25)), num_kv_heads=8, gqa=4,
                              head_dim=128, block_size=16, dtype=torch.bfloat16,
                              device="cuda", seed=seed)
        out = poisoned_like(b.q)
        shared_prefix_decode_attention(*b.shared_args(), out=out, strategy="cascade")
        assert rel_err(out, reference(*b.shared_args())) < 1.5e-2
    assert partials.num_direct >= before + 2


def test_direct_launches_can_be_turned_off():
    jit = FakeJit()
    cache = LaunchCache(jit, direct=False)
    for _ in range(2):
        cache((1,), _tensor(), 1, 0.5, _tensor())
    assert len(jit.compiles) == 2 and not jit.direct
