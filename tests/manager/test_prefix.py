from hypothesis import given, settings
from hypothesis import strategies as st

from parrot.manager.executor import (CACHED, MIN_CONTEXT_TOKENS, plan_prefix_contexts,
                                  shareable_hashes)
from parrot.manager.prefix import PrefixIndex, estimate_prompt, prefix_hashes_of, prefix_pieces
from parrot.template import parse_template
from parrot.types import estimate_num_tokens

SYSTEM = "S" * 300  # 75 tokens: worth a context
QUESTION = "Q" * 260  # 65 tokens


def test_hashes_are_cumulative_and_boundary_aware():
    t = parse_template(SYSTEM + "{{input:q}} tail {{output:a}} after {{input:z}}")
    a = prefix_pieces(t, {"q": "x", "z": "ignored"})
    b = prefix_pieces(t, {"q": "y", "z": "other"})
    assert [p.text for p in a] == [SYSTEM, "x", " tail "]
    assert a[0].prefix_hash == b[0].prefix_hash and a[1].prefix_hash != b[1].prefix_hash
    assert [p.is_template_text for p in a] == [True, False, True]
    # "ab" + "c" and "a" + "bc" render alike but have different boundaries.
    t2 = parse_template("{{input:x}}{{input:y}} {{output:o}}")
    h1 = prefix_pieces(t2, {"x": "ab", "y": "c"})[1].prefix_hash
    h2 = prefix_pieces(t2, {"x": "a", "y": "bc"})[1].prefix_hash
    assert h1 != h2


def test_plan_merges_unshared_pieces():
    t = parse_template(SYSTEM + "{{input:q}} tail {{output:a}}")
    pieces = prefix_pieces(t, {"q": QUESTION})
    contexts, head = plan_prefix_contexts(pieces, lambda h: 0)
    assert [c.text for c in contexts] == [SYSTEM] and head == QUESTION + " tail "
    contexts, head = plan_prefix_contexts(pieces, lambda h: 2 * (h == pieces[1].prefix_hash))
    assert [c.text for c in contexts] == [SYSTEM, QUESTION] and head == " tail "
    # only the template's leading text is marked as such (kept when its session goes)
    assert [c.is_template_text for c in contexts] == [True, False]
    short = prefix_pieces(parse_template("Hi {{input:q}} {{output:a}}"), {"q": "x"})
    assert plan_prefix_contexts(short, lambda h: 2) == ((), "Hi x ")


def test_a_short_piece_after_a_context_is_merged_forward_even_when_shared():
    pieces = prefix_pieces(parse_template(SYSTEM + "{{input:q}} tail {{output:a}}"),
                           {"q": "question"})
    contexts, head = plan_prefix_contexts(pieces, lambda h: 2)
    # " tail " ends the prefix too; "question tail " (14 chars) is not worth a context either.
    assert [c.text for c in contexts] == [SYSTEM] and head == "question tail "


def test_thousands_of_tiny_boundaries_make_few_contexts():
    """A reproduction: a prompt with 5,000 one-character inputs made a context at every
    boundary once
    it recurred (thousands of contexts, a wedged engine)."""
    n = 5_000
    template = parse_template("".join(f"{{{{input:x{i}}}}}" for i in range(n)) + "{{output:o}}")
    pieces = prefix_pieces(template, {f"x{i}": "a" for i in range(n)})
    assert len(pieces) == n
    # every boundary recurs, each shared by fewer calls than the one before (a branch point)
    sharers = {p.prefix_hash: n - i + 1 for i, p in enumerate(pieces)}
    contexts, head = plan_prefix_contexts(pieces, sharers.__getitem__)
    assert len(contexts) == n // (MIN_CONTEXT_TOKENS * 4) == 19
    assert all(estimate_num_tokens(c.text) >= MIN_CONTEXT_TOKENS for c in contexts)
    assert "".join(c.text for c in contexts) + head == "a" * n
    # The same prompt planned again (a second call) forks the deepest context the first filled.
    cached = {c.prefix_hash for c in contexts}
    again, _ = plan_prefix_contexts(pieces, lambda h: CACHED if h in cached else 0)
    assert [c.prefix_hash for c in again] == [contexts[-1].prefix_hash]


def test_index_remembers_recurring_prefixes_boundedly():
    index = PrefixIndex(max_remembered=2)
    index.add(("h1", "h2"))
    assert (index.occurrences("h1"), index.occurrences("h2")) == (1, 1)
    index.add(("h1",))
    assert (index.occurrences("h1"), index.occurrences("h2")) == (2, 1)
    index.add(("h3",))  # remembers at most two hashes: h2 (least recently seen) is forgotten
    assert len(index) == 2 and (index.occurrences("h1"), index.occurrences("h2")) == (2, 0)
    index.add(("h2",))  # seen again after being forgotten: counts from one
    assert (index.occurrences("h2"), index.occurrences("h1")) == (1, 0)  # h1 forgotten now


def test_a_whole_constant_prompt_is_not_cached_unless_it_recurs():
    # A rendered prompt (baseline mode) is all template text: caching it only pays if repeated.
    pieces = prefix_pieces(parse_template(SYSTEM + " question? {{output:a}}"), {})
    assert plan_prefix_contexts(pieces, lambda h: 0) == ((), SYSTEM + " question? ")
    contexts, head = plan_prefix_contexts(pieces, lambda h: 2)
    assert [c.text for c in contexts] == [SYSTEM + " question? "] and head == ""


def test_only_boundaries_worth_a_context_are_advertised():
    pieces = prefix_pieces(parse_template("Hi {{input:q}}" + "x" * 250 + " {{output:a}}"),
                           {"q": "there"})
    assert [len(p.text) for p in pieces] == [3, 5, 251]
    assert shareable_hashes(pieces) == (pieces[2].prefix_hash,)
    short = prefix_pieces(parse_template("Hi {{input:q}}" + "x" * 200 + " {{output:a}}"),
                          {"q": "there"})
    assert shareable_hashes(short) == ()  # 209 characters: under MIN_CONTEXT_TOKENS


def test_pieces_count_tokens_with_the_real_counts_of_generated_inputs():
    t = parse_template(SYSTEM + "{{input:code}} Review {{input:q}} {{output:a}} tail")
    code = "x" * 1300   # 325 tokens at 4 characters each; the engine generated 200
    estimated = prefix_pieces(t, {"code": code, "q": "why"})
    counted = prefix_pieces(t, {"code": code, "q": "why"}, token_counts={"code": 200})
    assert [p.prefix_hash for p in estimated] == [p.prefix_hash for p in counted]
    assert [p.num_tokens for p in estimated] == [75, 400, 402, 403, 403]
    # Known tokens add exactly; the rest of the text is estimated over its characters.
    assert [p.num_tokens for p in counted] == [75, 275, 277, 278, 278]
    # The whole prompt's estimate counts the text after the output too (" tail").
    assert estimate_prompt(t, {"code": code, "q": "why"}).num_tokens == \
        estimate_num_tokens(t.render({"code": code, "q": "why", "a": ""}))
    whole = estimate_prompt(t, {"code": code, "q": "why"}, token_counts={"code": 200})
    assert whole.num_tokens == 200 + 80 and whole.pieces == counted


def test_a_missing_input_ends_the_pieces_but_not_the_estimate():
    t = parse_template(SYSTEM + "{{input:a}} and {{input:b}} then {{output:o}} end")
    got = estimate_prompt(t, {"b": "x" * 40})
    assert [p.text for p in got.pieces] == [SYSTEM]
    assert got.num_tokens == estimate_num_tokens(SYSTEM + " and " + "x" * 40 + " then  end")


def test_contexts_are_cut_by_the_counted_tokens_of_generated_inputs():
    """A generated input's real count decides whether it is worth a context (as the same
    counts decide what `shareable_hashes` advertises): 400 characters the engine generated
    as 40 tokens (random-weight text runs ~6.5 characters a token) are not 100 tokens."""
    t = parse_template(SYSTEM + "{{input:code}}{{input:q}} {{output:a}}")
    values = {"code": "c" * 400, "q": "q" * 300}
    estimated = prefix_pieces(t, values)
    counted = prefix_pieces(t, values, token_counts={"code": 40})
    # every boundary a branch point: each shared by fewer calls than the one before
    everything_branches = {p.prefix_hash: 10 - i for i, p in enumerate(estimated)}.__getitem__
    contexts, _ = plan_prefix_contexts(estimated, everything_branches)
    assert [c.text for c in contexts] == [SYSTEM, "c" * 400, "q" * 300]
    contexts, _ = plan_prefix_contexts(counted, everything_branches)
    assert [c.text for c in contexts] == [SYSTEM, "c" * 400 + "q" * 300]
    assert [p.num_tokens for p in counted] == [75, 115, 190, 191]


def test_only_branch_points_of_the_sharing_get_contexts():
    """A recurring boundary that every call sharing it continues alike is merged into the next
    one: 16 calls sharing a design and 8 files get one context for all of it, not 9 nested ones
    filled one after the other; where the calls part, a context each side."""
    template = parse_template("{{input:design}}" + "".join(f"{{{{input:f{i}}}}}" for i in range(8))
                              + " Review {{input:which}} {{output:review}}")
    values = {"design": "d" * 800, **{f"f{i}": str(i) * 800 for i in range(8)}, "which": "f0"}
    pieces = prefix_pieces(template, values)
    hashes = [p.prefix_hash for p in pieces]
    # the design (and so the leading piece) is shared by 32 calls, the files by 16, the rest 1
    counts = {h: 32 if i == 0 else 16 if i <= 8 else 1 for i, h in enumerate(hashes)}
    contexts, head = plan_prefix_contexts(pieces, counts.__getitem__)
    assert [c.prefix_hash for c in contexts] == [hashes[0], hashes[8]]
    assert contexts[1].text == "".join(str(i) * 800 for i in range(8))
    assert head == " Review f0 "
    # Four of the 16 calls part after the fourth file: a context there too.
    counts.update({h: 4 for h in hashes[5:9]})
    contexts, _ = plan_prefix_contexts(pieces, counts.__getitem__)
    assert [c.prefix_hash for c in contexts] == [hashes[0], hashes[4], hashes[8]]
    # All 16 also share " Review " (reviewers of the same code): the context still ends with
    # the last file, where calls of another function reading the same files (revisers) part.
    counts.update({h: 16 for h in hashes[1:10]})
    assert pieces[9].is_template_text and pieces[9].text == " Review "
    contexts, head = plan_prefix_contexts(pieces, counts.__getitem__)
    assert [c.prefix_hash for c in contexts] == [hashes[0], hashes[8]] and head == " Review f0 "
    # A longer prefix already cached on the engine is forked: nothing before it is filled.
    counts[hashes[8]] = CACHED
    contexts, _ = plan_prefix_contexts(pieces, counts.__getitem__)
    assert [c.prefix_hash for c in contexts] == [hashes[8]]


# --- the hash is an injective encoding of (salt, pieces) ---------------------------------------

_TEXT = st.text(alphabet=st.sampled_from(["a", "b", "\x00", "\x01", "é", "\n"]), min_size=1,
                max_size=6)
_PROMPTS = st.tuples(st.sampled_from(["", "a", "team-a", "a\x00"]),
                     st.lists(_TEXT, min_size=1, max_size=4))


@settings(max_examples=3000, deadline=None)
@given(_PROMPTS, _PROMPTS)
def test_different_piece_sequences_never_hash_alike(one, other):
    """Every boundary's hash names exactly its salt and the pieces before it: over a small
    alphabet full of separator-like characters, two different (salt, pieces) never share one."""
    (salt_a, pieces_a), (salt_b, pieces_b) = one, other
    hashes_a = prefix_hashes_of(pieces_a, salt_a)
    hashes_b = prefix_hashes_of(pieces_b, salt_b)
    for i, h in enumerate(hashes_a):
        for j, g in enumerate(hashes_b):
            same = salt_a == salt_b and pieces_a[:i + 1] == pieces_b[:j + 1]
            assert (h == g) == same


def test_a_value_cannot_forge_another_tenants_salted_prefix():
    """A sharing (unsalted) tenant sends `'team-a\\x01' + doc`, the old salted encoding of
    tenant team-a's `doc`: it must not get team-a's hash."""
    doc = "The confidential onboarding document. " * 10
    template = parse_template("{{input:doc}} {{output:y}}")
    salted = prefix_pieces(template, {"doc": doc}, salt="team-a")
    for forged_value in ("team-a\x01" + doc, "team-a" + doc, "\x00" * 8 + "team-a" + doc):
        forged = prefix_pieces(template, {"doc": forged_value}, salt="")
        assert not {p.prefix_hash for p in forged} & {p.prefix_hash for p in salted}


def test_two_pieces_never_hash_as_their_concatenation_with_a_separator():
    template_two = parse_template("{{input:a}}{{input:b}}{{output:y}}")
    template_one = parse_template("{{input:a}}{{output:y}}")
    two = prefix_pieces(template_two, {"a": "left", "b": "right"}, salt="t")
    for joined in ("left\x00right", "left\x00right\x00", "leftright"):
        one = prefix_pieces(template_one, {"a": joined}, salt="t")
        assert one[-1].prefix_hash != two[-1].prefix_hash
