"""The reference worker's copy of the foreach rules is the server's (recovery checks saved items with that one)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recovery_console.reference import batches as sdk
from tasks import batches as server

text = st.text(max_size=8) | st.sampled_from(["{{item}}", "{{ item }}", "n={{item}}", "{{item}}-{{item}}"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(items=st.lists(json_values, max_size=4), args=st.dictionaries(st.text(max_size=5), json_values, max_size=3))
def test_both_copies_number_and_fill_in_items_alike(items, args):
    body = {"items": items, "do": {"tool": "file_write", "args": args}}
    ours, theirs = sdk.parse_batch(body), server.parse_batch(body)
    assert (ours.items, ours.tool, ours.args) == (theirs.items, theirs.tool, theirs.args)
    for position in range(1, len(items) + 1):
        assert sdk.item_args(ours, position) == server.item_args(theirs, position)
        assert sdk.item_seq(7, position) == server.item_seq(7, position)


@pytest.mark.parametrize(
    "body", [None, {"items": 1}, {"items": [], "do": {}}, {"items": [1], "do": {"tool": "subagent"}}]
)
def test_both_copies_refuse_the_same_bodies_with_the_same_words(body):
    with pytest.raises(ValueError) as ours:
        sdk.parse_batch(body)
    with pytest.raises(ValueError) as theirs:
        server.parse_batch(body)
    assert str(ours.value) == str(theirs.value)
