"""Launch planning (kernels/plan.py): split counts and loop shapes from host-known shapes."""
import torch

from parrot_kernels.plan import (ONE_SPLIT_PROGRAMS_PER_SM, SHORT_STEP_PROGRAMS_PER_SM,
                                 KernelTuning, make_plan)

CPU = torch.device("cpu")   # the planner counts 4 SMs off the GPU
SMS = 4


def paged(batch: int, kvh: int, max_len: int, tuning: KernelTuning | None = None):
    return make_plan(batch, 0, kvh, 1, 0, max_len, False, False, tuning or KernelTuning(), CPU)


def test_rows_that_fill_the_gpu_read_their_whole_context_in_one_program():
    plan = paged(ONE_SPLIT_PROGRAMS_PER_SM * SMS, 1, 4096)
    assert (plan.row_splits, plan.row_split_len, plan.num_slots) == (1, 4096, 0)
    assert plan.direct_out   # no merge launch


def test_too_few_rows_split_their_context_by_the_token_rule():
    plan = paged(1, 1, 4096)            # one program for 4 SMs: split by tokens
    assert plan.row_splits > 1 and plan.row_split_len >= 256 and plan.num_slots == plan.row_splits
    assert (plan.block_n, plan.num_stages) == (128, 2)


def test_the_short_loop_step_needs_several_programs_per_sm():
    few = paged(SHORT_STEP_PROGRAMS_PER_SM * SMS - 1, 1, 1024)
    many = paged(SHORT_STEP_PROGRAMS_PER_SM * SMS, 1, 1024)
    assert (few.block_n, few.num_stages, few.row_splits) == (128, 2, 1)
    assert (many.block_n, many.num_stages, many.row_splits) == (64, 3, 1)


def test_explicit_tuning_overrides_the_plan():
    plan = paged(64, 4, 1024, KernelTuning(split_tokens=256, block_n=32, num_stages=4))
    assert (plan.row_splits, plan.block_n, plan.num_stages) == (4, 32, 4)


def test_cascade_keeps_its_own_rule():
    # prefix tiles beside per-row suffix programs: splits by work, 2 stages, 64-token rows
    plan = make_plan(64, 1, 8, 4, 4096, 256, True, False, KernelTuning(), CPU)
    assert plan.n_tiles > 0 and plan.num_stages == 2 and plan.block_n == 64


def test_a_group_whose_rows_fit_the_smallest_tile_gets_it():
    # 16 rows sharing one prefix, MHA: one 16-row tile stepping 64 prefix tokens
    plan = make_plan(16, 1, 32, 1, 4096, 256, True, False, KernelTuning(), CPU)
    assert (plan.block_m, plan.tile_block_n, plan.n_tiles) == (16, 64, 1)
    # 17 rows would not fit it: the 64-row tile, and its own prefix step rule
    plan = make_plan(17, 1, 32, 1, 4096, 256, True, False, KernelTuning(), CPU)
    assert (plan.block_m, plan.n_tiles) == (64, 1)
    # GQA 4: 4 rows x 4 heads fit, 5 do not; two groups of 8 rows would need 2 x 8 tiles
    assert make_plan(5, 2, 8, 4, 4096, 256, True, False, KernelTuning(), CPU).block_m == 16
    assert make_plan(5, 1, 8, 4, 4096, 256, True, False, KernelTuning(), CPU).block_m == 64
    # an explicit tile wins; paged plans keep one tile size (no second compiled variant)
    explicit = make_plan(16, 1, 32, 1, 4096, 256, True, False, KernelTuning(block_m=64), CPU)
    assert (explicit.block_m, explicit.tile_block_n) == (64, 32)
    assert paged(1, 1, 4096).block_m == paged(64, 1, 4096).block_m == 64
