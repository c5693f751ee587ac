from parrot.core.executor import MIN_CONTEXT_TOKENS, plan_prefix_contexts, shareable_hashes
from parrot.core.prefix import PrefixIndex, estimate_prompt, prefix_pieces
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
    contexts, head = plan_prefix_contexts(pieces, lambda h: False)
    assert [c.text for c in contexts] == [SYSTEM] and head == QUESTION + " tail "
    contexts, head = plan_prefix_contexts(pieces, lambda h: h == pieces[1].prefix_hash)
    assert [c.text for c in contexts] == [SYSTEM, QUESTION] and head == " tail "
    short = prefix_pieces(parse_template("Hi {{input:q}} {{output:a}}"), {"q": "x"})
    assert plan_prefix_contexts(short, lambda h: True) == ((), "Hi x ")


def test_a_short_piece_after_a_context_is_merged_forward_even_when_shared():
    pieces = prefix_pieces(parse_template(SYSTEM + "{{input:q}} tail {{output:a}}"),
                           {"q": "question"})
    contexts, head = plan_prefix_contexts(pieces, lambda h: True)
    # " tail " ends the prefix too; "question tail " (14 chars) is not worth a context either.
    assert [c.text for c in contexts] == [SYSTEM] and head == "question tail "


def test_thousands_of_tiny_boundaries_make_few_contexts():
    """Issue 9: a prompt with 5,000 one-character inputs made a context at every boundary once
    it recurred (thousands of contexts, a wedged engine)."""
    n = 5_000
    template = parse_template("".join(f"{{{{input:x{i}}}}}" for i in range(n)) + "{{output:o}}")
    pieces = prefix_pieces(template, {f"x{i}": "a" for i in range(n)})
    assert len(pieces) == n
    contexts, head = plan_prefix_contexts(pieces, lambda h: True)  # every boundary recurs
    assert len(contexts) == n // (MIN_CONTEXT_TOKENS * 4) == 19
    assert all(estimate_num_tokens(c.text) >= MIN_CONTEXT_TOKENS for c in contexts)
    assert "".join(c.text for c in contexts) + head == "a" * n
    # The same prompt planned again (a second call) picks the same boundaries.
    again, _ = plan_prefix_contexts(pieces, {c.prefix_hash for c in contexts}.__contains__)
    assert again == contexts


def test_index_remembers_recurring_prefixes_boundedly():
    index = PrefixIndex(max_remembered=2)
    index.add(("h1", "h2"))
    assert not index.is_recurring("h1") and not index.is_recurring("h2")
    index.add(("h1",))
    assert index.is_recurring("h1") and not index.is_recurring("h2")
    index.add(("h3",))  # remembers at most two hashes: h2 (least recently seen) is forgotten
    assert len(index) == 2 and index.is_recurring("h1") and not index.is_recurring("h2")
    index.add(("h2",))  # seen again after being forgotten: counts from one
    assert not index.is_recurring("h2") and not index.is_recurring("h1")  # h1 forgotten now


def test_a_whole_constant_prompt_is_not_cached_unless_it_recurs():
    # A rendered prompt (baseline mode) is all template text: caching it only pays if repeated.
    pieces = prefix_pieces(parse_template(SYSTEM + " question? {{output:a}}"), {})
    assert plan_prefix_contexts(pieces, lambda h: False) == ((), SYSTEM + " question? ")
    contexts, head = plan_prefix_contexts(pieces, lambda h: True)
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
    everything_recurs = lambda h: True  # noqa: E731
    contexts, _ = plan_prefix_contexts(estimated, everything_recurs)
    assert [c.text for c in contexts] == [SYSTEM, "c" * 400, "q" * 300]
    contexts, _ = plan_prefix_contexts(counted, everything_recurs)
    assert [c.text for c in contexts] == [SYSTEM, "c" * 400 + "q" * 300]
    assert [p.num_tokens for p in counted] == [75, 115, 190, 191]
