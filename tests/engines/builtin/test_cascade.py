"""Grouping decode rows by shared prefix blocks for the shared-prefix kernel."""

from parrot.engines.builtin.cascade import plan_shared_prefix


def test_groups_rows_forked_from_one_parent():
    tables = [[0, 1, 2, 9], [5, 6], [0, 1, 2, 10], [0, 1, 3]]
    lens = [14, 6, 13, 10]
    plan = plan_shared_prefix(tables, lens, 4, min_tokens=8, min_group=2)
    assert plan is not None
    # rows 0, 2, 3 share blocks [0, 1] (8 tokens); row 1 stands alone
    assert (plan.order, plan.group_sizes, plan.prefix_blocks) == ([0, 2, 3, 1], [3, 1], [2, 0])


def test_no_plan_when_sharing_is_too_short_or_too_rare():
    tables = [[0, 1, 2], [0, 1, 3], [4, 5]]
    assert plan_shared_prefix(tables, [12, 12, 8], 4, min_tokens=12, min_group=2) is None
    assert plan_shared_prefix(tables, [12, 12, 8], 4, min_tokens=4, min_group=3) is None


def test_prefix_never_covers_a_rows_last_token():
    # both rows end exactly at a block boundary: the last block holds the new token
    plan = plan_shared_prefix([[0, 1], [0, 1]], [8, 8], 4, min_tokens=4, min_group=2)
    assert plan is not None and plan.prefix_blocks == [1]
