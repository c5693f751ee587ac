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
    from parrot_kernels import jit
    from parrot_kernels.launch import launcher

    from .factories import make_shared_batch

    partials = launcher(jit.decode_partial_kernel)
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


def _recorded(jit, *tensors):
    """A recording of two launches of a LaunchCache over `jit`: (a, 3, 0.5, b) and then
    (b, 4, 0.5, workspace) with a tensor allocated in between, as a wrapper's would be."""
    from parrot_kernels.launch import recording
    cache = _cache(jit)
    a, b = tensors
    workspace = _tensor()
    with recording() as rec:
        cache((2,), a, 3, 0.5, b)
        cache((5,), b, 4, 0.5, workspace)
    return rec, workspace


def test_a_recording_replays_its_launches_with_the_new_tensors():
    jit = FakeJit()
    old = (_tensor(), _tensor())
    rec, workspace = _recorded(jit, *old)
    assert rec.num_launches == 2 and len(jit.compiles) == 2 and not jit.direct
    new = (_tensor(), _tensor())
    assert rec.replay(old, new) and rec.num_replays == 1
    (first, one), (second, two) = jit.direct
    assert (first.key, second.key) == (1, 2)
    assert one[:3] == (2, 1, 1) and one[9] is new[0] and one[12] is new[1]
    assert two[:3] == (5, 1, 1) and two[9] is new[1] and two[12] is workspace


@pytest.mark.parametrize("change", ["shape", "stride", "dtype", "alignment"])
def test_a_replay_with_another_layout_declines(change):
    jit = FakeJit()
    old = (_tensor(), _tensor())
    rec, _ = _recorded(jit, *old)
    other = {"shape": torch.zeros(80, dtype=torch.float16)[8:],
             "stride": torch.zeros(128, dtype=torch.float16)[::2],
             "dtype": _tensor(dtype=torch.float32),
             "alignment": torch.zeros(72, dtype=torch.float16)[9:]}[change]
    assert not rec.replay(old, (other, _tensor()))
    assert not jit.direct


def test_a_view_made_inside_the_wrapper_is_not_replayed():
    """A launch that took a view of an input the caller did not name cannot be swapped."""
    from parrot_kernels.launch import recording
    jit = FakeJit()
    cache = _cache(jit)
    a, b = torch.zeros(128, dtype=torch.float16), _tensor()
    with recording() as rec:
        cache((1,), a[64:], 3, 0.5, b)           # a view of `a` made by the "wrapper"
    assert not rec.replay((a, b), (torch.zeros(128, dtype=torch.float16), _tensor()))
    assert not jit.direct


def test_a_recording_with_a_launch_the_jit_did_not_keep_declines():
    from parrot_kernels.launch import recording
    jit = FakeJit(compiled=False)               # the interpreter
    cache = _cache(jit)
    old = (_tensor(), _tensor())
    with recording() as rec:
        cache((1,), old[0], 3, 0.5, old[1])
    assert not rec.replay(old, (_tensor(), _tensor())) and not jit.direct


def test_launches_outside_a_recording_are_not_recorded():
    from parrot_kernels.launch import recording
    jit = FakeJit()
    cache = _cache(jit)
    x, y = _tensor(), _tensor()
    cache((1,), x, 3, 0.5, y)
    with recording() as rec:
        pass
    cache((1,), x, 3, 0.5, y)
    assert rec.num_launches == 0


@pytest.mark.gpu
def test_a_steps_attention_recorded_at_one_layer_replays_at_another_on_cuda():
    """A mixed step's decode and prefill attention recorded over one layer's caches, then
    replayed over another layer's (the step's metadata is every layer's): the second
    layer's own attention."""
    from parrot_kernels import (paged_prefill_attention, plan_prefill,
                                reference_paged_prefill_attention,
                                reference_shared_prefix_decode_attention,
                                shared_prefix_decode_attention)
    from parrot_kernels.launch import recording

    from .factories import make_shared_batch

    b = make_shared_batch(group_sizes=[1, 7, 8], prefix_blocks=[3, 0, 64],
                          suffix_lens=list(range(1, 17)), num_kv_heads=8, gqa=4,
                          head_dim=128, block_size=16, dtype=torch.bfloat16, device="cuda",
                          seed=1)
    caches = [(b.k_cache, b.v_cache), (torch.randn_like(b.k_cache), torch.randn_like(b.v_cache))]
    table = torch.arange(8, dtype=torch.int32, device="cuda")[None]
    plan = plan_prefill([(16, 60, 40)], table)   # 60 rows after the 16 decode rows
    q = torch.randn(76, 32, 128, device="cuda").bfloat16()
    meta = b.shared_args()[3:]                   # the step's decode metadata and scale
    rec = old = None
    for k_cache, v_cache in caches:
        out = torch.full_like(q, float("nan"))
        tensors = (q[:16], out[:16], q, out, k_cache, v_cache)
        if rec is None:
            with recording() as rec:
                # the very views named in `tensors` (a view made here would not be replayed)
                shared_prefix_decode_attention(tensors[0], k_cache, v_cache, *meta,
                                               out=tensors[1], strategy="cascade")
                paged_prefill_attention(q, k_cache, v_cache, plan, 0.088, out=out)
            old = tensors
        else:
            assert rec.replay(old, tensors)
        decode = reference_shared_prefix_decode_attention(q[:16], k_cache, v_cache, *meta)
        prefill = reference_paged_prefill_attention(q, k_cache, v_cache, plan.chunks, table,
                                                    0.088)
        assert rel_err(out[:16], decode) < 1.5e-2
        assert rel_err(out[16:], prefill[16:]) < 1.5e-2
    assert rec.num_launches >= 2
