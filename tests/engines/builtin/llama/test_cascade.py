"""Grouping decode rows by shared prefix blocks for the shared-prefix kernel."""

import pytest

from parrot.engines.builtin.llama.cascade import pad_groups, plan_shared_prefix, split_groups


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


def test_pad_groups_pads_like_a_graph_bucket():
    groups = split_groups([[5, 6, 7], [5, 6, 8], [9]], [10, 11, 2], [2, 1], [2, 0], 4)
    # two groups in a bucket of two: the padding row joins the last (prefix-less) group
    padded = pad_groups(groups, 4, 2, pad_block=0)
    assert padded.indptr == [0, 2, 4]
    assert padded.prefix_tables == [[5, 6], []] and padded.prefix_lens == [8, 0]
    assert padded.suffix_tables == [[7], [8], [9], [0]]
    assert padded.suffix_lens == [2, 3, 2, 1]
    # a bucket of four groups: empty padding groups, the padding row in the last one
    padded = pad_groups(groups, 4, 4, pad_block=3)
    assert padded.indptr == [0, 2, 3, 3, 4]
    assert padded.prefix_lens == [8, 0, 0, 0] and padded.prefix_tables[2:] == [[], []]
    assert padded.suffix_tables[3] == [3]
    assert pad_groups(groups, 3, 2, 0) == groups         # already a bucket: unchanged


@pytest.mark.parametrize("batch,num_groups", [(2, 2), (4, 1), (4, 5)])
def test_pad_groups_rejects_buckets_that_do_not_hold_the_rows(batch, num_groups):
    groups = split_groups([[5, 6, 7], [5, 6, 8], [9]], [10, 11, 2], [2, 1], [2, 0], 4)
    with pytest.raises(ValueError, match="cannot pad"):
        pad_groups(groups, batch, num_groups, 0)


def test_the_shared_prefix_ends_at_the_first_block_any_row_differs_in():
    first = list(range(100, 140))
    rows = [first + [1], first[:25] + [2] + first[26:] + [3], first[:31] + [4] + first[32:],
            first + [5]]
    lens = [4 * 41] * 4
    plan = plan_shared_prefix(rows, lens, 4, min_tokens=8, min_group=2)
    assert plan is not None and plan.group_sizes == [4] and plan.prefix_blocks == [25]
    # the whole table when every row agrees up to its last token's block
    same = plan_shared_prefix([first + [1], first + [2]], [4 * 40 + 1] * 2, 4, min_tokens=8,
                              min_group=2)
    assert same is not None and same.prefix_blocks == [40]
    # a mismatch in the very first shared block after the bucket's key
    none = plan_shared_prefix([[7, 1, 2], [7, 3, 2]], [12, 12], 4, min_tokens=4, min_group=2)
    assert none is not None and none.prefix_blocks == [1]
