"""Pure: the `foreach` tool's arguments, its item numbering and `{{item}}` substitution.

Shared by the reference worker (which runs the items) and by recovery (which
checks that a saved item is the call its batch asked for). No Django in here,
so the worker can import it on any machine.

`{"tool": "foreach", "args": {"items": [...], "do": {"tool": ..., "args": {...}}}}`
runs `do` once per item. In `do.args`, every string anywhere in the structure
(values of objects, elements of lists, at any depth; never object keys) has its
`{{item}}` placeholders (spaces inside the braces allowed: `{{ item }}`) replaced:

- a string that is exactly one placeholder becomes the item value itself, of
  whatever JSON type (`"{{item}}"` with item `{"id": 7}` gives `{"id": 7}`);
- a placeholder inside a longer string becomes the item's text: a string item
  as it is, any other item as compact JSON with sorted keys (`"n={{item}}"` with item 7 gives
  `"n=7"`, with item `[1, 2]` gives `"n=[1,2]"`, with `null` gives `"n=null"`).

Item i (from 1) of the foreach at top-level step `seq` is the nested step
`seq * NESTED_BASE + i`, as a subagent's calls are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

NESTED_BASE = 100_000  # nested step numbers: parent seq * NESTED_BASE + position (plans hold ≤ 10,000 steps)
MAX_ITEMS = NESTED_BASE - 1
FOREACH = "foreach"
# An item may not open a group of its own: its calls could not be numbered.
NOT_AN_ITEM = frozenset({"foreach", "subagent"})

_PLACEHOLDER = re.compile(r"\{\{\s*item\s*\}\}")


@dataclass(frozen=True)
class Batch:
    items: list
    tool: str
    args: dict


def parse_batch(args: Any) -> Batch:
    """The foreach arguments as a Batch; ValueError with a sentence saying what is wrong."""
    if not isinstance(args, Mapping):
        raise ValueError("foreach arguments are not an object")
    items, do = args.get("items"), args.get("do")
    if not isinstance(items, list):
        raise ValueError("foreach needs `items`, a list")
    if len(items) > MAX_ITEMS:
        raise ValueError(f"a foreach holds at most {MAX_ITEMS} items")
    if not isinstance(do, Mapping) or not isinstance(do.get("tool"), str) or not do["tool"]:
        raise ValueError("foreach needs `do`, an object with a `tool` name")
    inner_args = do.get("args") if do.get("args") is not None else {}
    if not isinstance(inner_args, Mapping):
        raise ValueError("foreach `do.args` is not an object")
    if do["tool"] in NOT_AN_ITEM:
        raise ValueError(f"a foreach item cannot be a {do['tool']}")
    return Batch(items=items, tool=do["tool"], args=dict(inner_args))


def item_text(item: Any) -> str:
    return (
        item if isinstance(item, str) else json.dumps(item, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    )


def substitute(template: Any, item: Any) -> Any:
    """`template` with every `{{item}}` replaced as the module docstring says; the template is not changed."""
    if isinstance(template, str):
        if _PLACEHOLDER.fullmatch(template):
            return item
        if _PLACEHOLDER.search(template):
            text = item_text(item)
            return _PLACEHOLDER.sub(lambda _m: text, template)
        return template
    if isinstance(template, Mapping):
        return {key: substitute(value, item) for key, value in template.items()}
    if isinstance(template, list):
        return [substitute(value, item) for value in template]
    return template


def item_args(batch: Batch, position: int) -> dict:
    """The arguments of item `position` (from 1)."""
    return substitute(batch.args, batch.items[position - 1])


def item_seq(parent_seq: int, position: int) -> int:
    return parent_seq * NESTED_BASE + position


def item_position(seq: int, parent_seq: int) -> int:
    return seq - parent_seq * NESTED_BASE


def parent_of(seq: int) -> int | None:
    """The step a nested step (a batch item, a subagent's call) is numbered under; None for a top-level step."""
    return seq // NESTED_BASE if seq >= NESTED_BASE else None
