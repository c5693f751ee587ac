"""The Triton kernels themselves, by public name, for tools that compile or inspect them
apart from a launch (the sm_90 compile check, the launch-cache and compile-counting tests).
The wrappers (decode.py, prefill.py) are how everything else runs them. Importing this
module imports Triton and decides interpretation (TRITON_INTERPRET) as `_jit_decode` does."""

from __future__ import annotations

from parrot_kernels._jit_decode import _decode_partial_kernel as decode_partial_kernel
from parrot_kernels._jit_decode import _merge_splits_kernel as merge_splits_kernel
from parrot_kernels._jit_decode import _merge_two_kernel as merge_two_kernel
from parrot_kernels._jit_prefill import _merge_prefill_splits_kernel as merge_prefill_splits_kernel
from parrot_kernels._jit_prefill import _paged_prefill_kernel as paged_prefill_kernel

__all__ = ["decode_partial_kernel", "merge_prefill_splits_kernel", "merge_splits_kernel",
           "merge_two_kernel", "paged_prefill_kernel"]
