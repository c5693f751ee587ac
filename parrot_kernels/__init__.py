"""parrot_kernels: Triton decode- and prefill-attention and fused decode-layer kernels for
Parrot's builtin engine.

The repo folder ``parrot_kernels/`` (named as it imports: a folder ``kernels/`` at the repo
root shadowed HF's ``kernels`` package, which transformers imports). Importing it needs
torch only; Triton is imported on the first kernel launch (so ``TRITON_INTERPRET=1`` may be
set until then). On CPU tensors without ``TRITON_INTERPRET=1`` the public functions fall back
to the PyTorch references (fp32), so callers never need a GPU to import or call them.
"""
from .decode import (merge_attention_states, paged_decode_attention,
                     shared_prefix_decode_attention)
from .fused import (add_rms_norm, reference_add_rms_norm, reference_rope_kv_write,
                    reference_silu_mul, rope_kv_write, silu_mul)
from .gemv import MAX_GEMV_ROWS, DotTuning, GemvTuning, kernel_wins, small_batch_linear
from .launch import Recording, recording
from .prefill import (PREFILL_TUNINGS, PrefillPlan, PrefillTuning, paged_prefill_attention,
                      plan_prefill, tuning_for)
from .plan import (KernelTuning, choose_shared_prefix_strategy, paged_decode_workspace_numel,
                   shared_prefix_decode_workspace_numel)
from .version import source_digest
from .reference import (reference_merge_attention_states, reference_paged_decode_attention,
                        reference_paged_prefill_attention,
                        reference_shared_prefix_decode_attention)

__all__ = [
    "MAX_GEMV_ROWS",
    "DotTuning",
    "GemvTuning",
    "kernel_wins",
    "small_batch_linear",
    "add_rms_norm",
    "reference_add_rms_norm",
    "reference_rope_kv_write",
    "reference_silu_mul",
    "rope_kv_write",
    "silu_mul",
    "KernelTuning",
    "choose_shared_prefix_strategy",
    "merge_attention_states",
    "paged_decode_attention",
    "paged_prefill_attention",
    "plan_prefill",
    "PrefillPlan",
    "PrefillTuning",
    "Recording",
    "recording",
    "PREFILL_TUNINGS",
    "tuning_for",
    "paged_decode_workspace_numel",
    "reference_merge_attention_states",
    "reference_paged_decode_attention",
    "reference_paged_prefill_attention",
    "reference_shared_prefix_decode_attention",
    "shared_prefix_decode_attention",
    "shared_prefix_decode_workspace_numel",
    "source_digest",
]
