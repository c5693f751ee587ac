"""Compile the decode and prefill kernels for sm_90 (H100/H200) on a machine without a GPU.

Triton's wheel carries ptxas, so the whole GPU path (frontend, layouts, pipelining, ptxas)
runs on the CPU; the interpreter never sees errors that only compilation finds (non-constexpr
globals, layout or shared-memory limits). Run it with TRITON_INTERPRET unset (the tests spawn
a subprocess); ``python -m tests.kernels.sm90_compile`` prints registers and shared memory.
"""
from __future__ import annotations

import inspect
import os
import re
import subprocess

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

_DIVISIBLE = ("_ptr", "stride_kb", "stride_ks", "stride_kh", "stride_qb", "stride_qh",
              "stride_ob", "stride_oh")


def compile_sm90(kernel, constexprs: dict, dtype: str = "bf16", num_warps: int = 4,
                 num_stages: int = 2) -> dict:
    """Compile a @triton.jit kernel of _jit_decode; returns ptxas' resource usage."""
    params = list(inspect.signature(kernel.fn).parameters)
    fp_ptrs = {"q_ptr", "k_ptr", "v_ptr", "out_ptr", "out_a_ptr", "out_b_ptr"}
    sig = {}
    for p in params:
        if p in constexprs:
            sig[p] = "constexpr"
        elif p.endswith("_ptr"):
            sig[p] = f"*{dtype}" if p in fp_ptrs else "*fp32" if "ws" in p or "lse" in p else "*i32"
        else:
            sig[p] = "fp32" if p.startswith("scale") else "i32"
    attrs = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(params)
             if p.endswith(_DIVISIBLE)}
    compiled = triton.compile(ASTSource(kernel, sig, constexprs, attrs),
                              target=GPUTarget("cuda", 90, 32),
                              options=dict(num_warps=num_warps, num_stages=num_stages))
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    path = f"/tmp/parrot_kernels_{os.getpid()}.cubin"
    with open(path, "wb") as f:
        f.write(compiled.asm["cubin"])
    usage = subprocess.run([cuobjdump, "--dump-resource-usage", path], capture_output=True,
                           text=True, check=True).stdout
    os.unlink(path)
    found = dict(re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", usage))
    return {"regs": int(found["REG"]), "spill_bytes": int(found["LOCAL"]),
            "dyn_smem": compiled.metadata.shared}


def decode_constexprs(*, kvh=32, gqa=1, head_dim=128, page=16, block_h=1, block_m=64,
                      block_n=64, tile_block_n=64, block_g=2, tiles=True, rows=True,
                      row_has_prefix=False, direct_out=False, use_dot=False) -> dict:
    return dict(KVH=kvh, GQA=gqa, HEAD_DIM=head_dim, PAGE=page, BLOCK_H=block_h,
                BLOCK_M=block_m, BLOCK_N=block_n, TILE_BLOCK_N=tile_block_n, BLOCK_G=block_g,
                PREFIX_TILES=tiles, ROW_PROGRAMS=rows, ROW_HAS_PREFIX=row_has_prefix,
                DIRECT_OUT=direct_out, USE_DOT=use_dot)


def ci_cases(jit) -> dict:
    """A few launch configurations the wrappers produce, one per distinct code path."""
    return {
        "fused MHA, dot rows": (jit.decode_partial_kernel, decode_constexprs(
            block_h=16, use_dot=True, tile_block_n=32), 4),
        "fused MHA, dot rows, small prefix tile": (jit.decode_partial_kernel,
                                                   decode_constexprs(block_h=16, use_dot=True,
                                                                     block_m=16), 4),
        "paged MHA, dot rows, block_n 128": (jit.decode_partial_kernel, decode_constexprs(
            tiles=False, block_h=16, use_dot=True, block_n=128, direct_out=True), 4),
        "paged MHA, dot rows, block_n 64, 3 stages": (jit.decode_partial_kernel,
                                                      decode_constexprs(
            tiles=False, block_h=16, use_dot=True, block_n=64, direct_out=True), 4, 3),
        "fused GQA 4, dot rows, prefix": (jit.decode_partial_kernel, decode_constexprs(
            kvh=8, gqa=4, block_h=16, use_dot=True, row_has_prefix=True), 4),
        "paged direct, GQA 3 elementwise": (jit.decode_partial_kernel, decode_constexprs(
            tiles=False, gqa=3, block_h=4, direct_out=True, head_dim=64, page=32), 4),
        "merge splits": (jit.merge_splits_kernel, dict(HQ=32, HEAD_DIM=128, BLOCK_S=8), 1),
        "merge two": (jit.merge_two_kernel, dict(HEAD_DIM=128, BLOCK_D=128), 1),
    }


def prefill_cases(jit) -> dict:
    """The paged prefill kernel's launches: both tiles (prefill.PREFILL_TUNINGS, as the engine
    launches them), whole and with its keys split into ranges, and the merge of the ranges."""
    from parrot_kernels.prefill import PREFILL_TUNINGS

    cases = {}
    for t in PREFILL_TUNINGS:
        for split in (False, True):
            name = (f"prefill {t.block_m}x{t.block_n} tile, {t.num_warps} warps"
                    + (", key ranges" if split else ""))
            cases[name] = (jit.paged_prefill_kernel,
                           dict(GQA=1, HEAD_DIM=128, PAGE=16, BLOCK_M=t.block_m,
                                BLOCK_N=t.block_n, SPLIT=split), t.num_warps, t.num_stages)
    cases["prefill merge ranges"] = (jit.merge_prefill_splits_kernel,
                                     dict(HEAD_DIM=128,
                                          BLOCK_M=max(t.block_m for t in PREFILL_TUNINGS)), 4)
    return cases


def main() -> None:
    import sys

    from parrot_kernels import jit

    cases = {**ci_cases(jit), **prefill_cases(jit)}
    if "--all" in sys.argv:
        for name, const in {
            "tiles only": decode_constexprs(rows=False),
            "tiles only bn32": decode_constexprs(rows=False, tile_block_n=32),
            "rows MHA elementwise bn64": decode_constexprs(tiles=False),
            "rows MHA elementwise bn32": decode_constexprs(tiles=False, block_n=32),
            "rows MHA dot": decode_constexprs(tiles=False, block_h=16, use_dot=True),
        }.items():
            cases[name] = (jit.decode_partial_kernel, const, 4)
    for name, (kernel, const, warps, *stages) in cases.items():
        usage = compile_sm90(kernel, const, num_warps=warps, num_stages=stages[0] if stages else 2)
        print(f"{name}: {usage}", flush=True)
        assert usage["spill_bytes"] == 0, f"{name} spills registers"


if __name__ == "__main__":
    main()
