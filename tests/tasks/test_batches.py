"""The foreach tool's arguments and `{{item}}` substitution (tasks.batches). Pure."""

import pytest

from tasks.batches import item_args, item_position, item_seq, parse_batch, substitute


def test_a_whole_placeholder_becomes_the_item_value_of_any_type():
    assert substitute("{{item}}", {"id": 7, "tags": ["a"]}) == {"id": 7, "tags": ["a"]}
    assert substitute("{{ item }}", 3) == 3
    assert substitute("{{item}}", None) is None
    assert substitute({"n": "{{item}}"}, [1, 2]) == {"n": [1, 2]}


def test_a_placeholder_inside_a_longer_string_becomes_text_json_for_anything_but_a_string():
    assert substitute("out/{{item}}.txt", "a b") == "out/a b.txt"
    assert substitute("n={{item}}", 7) == "n=7"
    assert substitute("n={{item}}", [1, 2]) == "n=[1,2]"
    assert substitute("v={{item}}", {"b": 1, "a": "é"}) == 'v={"a":"é","b":1}'  # sorted keys, compact
    assert substitute("{{item}}-{{item}}", True) == "true-true"
    assert substitute("x={{item}}", None) == "x=null"


def test_substitution_reaches_every_string_in_the_structure_but_not_keys_or_other_values():
    template = {"path": "{{item}}.md", "json": {"list": ["{{item}}", 2, "id {{item}}"]}, "{{item}}": 1.5, "t": True}
    assert substitute(template, "a") == {"path": "a.md", "json": {"list": ["a", 2, "id a"]}, "{{item}}": 1.5, "t": True}
    assert template["path"] == "{{item}}.md"  # the template itself is not changed


def test_items_are_numbered_under_their_parent():
    assert item_seq(1, 3) == 100_003
    assert item_position(100_003, 1) == 3
    batch = parse_batch(
        {"items": ["a", "b"], "do": {"tool": "file_write", "args": {"path": "{{item}}", "content": "x"}}}
    )
    assert item_args(batch, 2) == {"path": "b", "content": "x"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"do": {"tool": "sleep"}}, "`items`, a list"),
        ({"items": "abc", "do": {"tool": "sleep"}}, "`items`, a list"),
        ({"items": [1]}, "`do`"),
        ({"items": [1], "do": {"args": {}}}, "`do`"),
        ({"items": [1], "do": {"tool": "sleep", "args": [1]}}, "not an object"),
        ({"items": [1], "do": {"tool": "subagent", "args": {}}}, "cannot be a subagent"),
        ({"items": [1], "do": {"tool": "foreach", "args": {}}}, "cannot be a foreach"),
        ({"items": list(range(100_000)), "do": {"tool": "sleep"}}, "at most 99999"),
    ],
)
def test_malformed_foreach_arguments_say_what_is_wrong(args, message):
    with pytest.raises(ValueError, match=message):
        parse_batch(args)
