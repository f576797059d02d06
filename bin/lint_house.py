"""`make lint`'s house rules, read from the syntax tree (no Django needed): exit 1 with each offence.

1. One writer per state. A run's, task's, message's, action's or bulk operation's `status`, a step's `phase`, an
   attempt's `outcome` and a bulk item's `result` change only through their machine (`tasks/transitions.py`,
   `recovery/transitions.py`): no `.update(status=…)`, `.status = …` or the like anywhere else. Services create
   rows in their first state (`CREATORS`).
2. No HTML built in Python strings under `console/`: markup lives in templates (a fragment a push sends is the
   fragment a reload renders). Template filters (`console/templatetags/`) are the template layer itself: a
   filter returns its one element through `format_html`. `HTML_NOT_YET` would list a module that still builds
   some, as a known debt; it is empty.

`python bin/lint_house.py` checks the tree; tests/tasks/test_transitions.py checks that each rule catches what
it should.
"""

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MACHINES = {"tasks/transitions.py", "recovery/transitions.py"}
# Columns a machine moves: any write of them is a move. `result` is also a step's saved result and an export's,
# so it counts only on a bulk item (a call chain starting at `BulkItem`).
STATE_FIELDS = ("status", "phase", "outcome")
ITEM_FIELD = ("BulkItem", "result")
# `state` is a breaker's (recovery.transitions.BREAKERS); other models' `state` words are not machines' columns.
BREAKER_FIELD = ("RecoveryBreaker", "state")
# Services create rows in their first state; only the machines move them.
CREATORS = {
    "tasks/services.py",
    "recovery/action_log.py",
    "recovery/actions/commands.py",
    "recovery/actions/continuations.py",
    "recovery/actions/followups.py",
    "recovery/workspaces/repairs.py",
}
WRITES = ("update", "bulk_update", "update_or_create")
CREATES = ("create", "get_or_create")

TAGS = (
    "div span p a ul ol li section article template button form input time table tr td th h1 h2 h3 h4 h5 h6 "
    "details summary strong em br output label select option nav header footer main"
).split()
HTML = re.compile(r"</?(?:" + "|".join(TAGS) + r")\b")
HTML_NOT_YET: set[str] = set()  # modules still building markup by hand, each a known debt: none


def _root_name(node) -> str | None:
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def state_writes(source: str, filename: str = "<string>") -> list[str]:
    """Every write of a machine's column in `source`: `update(status=…)`, `create(phase=…)`, `.outcome = …`."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            keywords = {k.arg for k in node.keywords}
            fields = [f for f in STATE_FIELDS if f in keywords]
            if _root_name(node.func) == ITEM_FIELD[0] and ITEM_FIELD[1] in keywords:
                fields.append(ITEM_FIELD[1])
            if _root_name(node.func) == BREAKER_FIELD[0] and BREAKER_FIELD[1] in keywords and node.func.attr in WRITES:
                fields.append(BREAKER_FIELD[1])
            for name in fields:
                if node.func.attr in WRITES:
                    found.append(f"{node.func.attr}({name}=…) at line {node.lineno}")
                elif node.func.attr in CREATES:
                    found.append(f"create({name}=…) at line {node.lineno}")
        if isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in STATE_FIELDS:
                    found.append(f".{target.attr} = … at line {node.lineno}")
    return found


def html_strings(source: str, filename: str = "<string>") -> list[str]:
    """String literals (f-strings included) that hold markup; docstrings are prose and are left alone."""
    tree = ast.parse(source, filename=filename)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if HTML.search(node.value):
                lines.add(node.lineno)
    return [f"markup in a string at line {n}" for n in sorted(lines)]


def sources(*dirs: str):
    for d in dirs:
        for path in sorted((ROOT / d).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path.relative_to(ROOT).as_posix(), path.read_text()


def offences() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for rel, text in sources("tasks", "recovery", "console"):
        if rel in MACHINES:
            continue
        writes = state_writes(text, rel)
        if rel in CREATORS:
            writes = [w for w in writes if not w.startswith("create(")]
        if writes:
            out.setdefault(rel, []).extend(f"{w}: a state written outside its machine" for w in writes)
    for rel, text in sources("console"):
        if rel in HTML_NOT_YET or rel.startswith("console/templatetags/"):
            continue
        if found := html_strings(text, rel):
            out.setdefault(rel, []).extend(f"{f}: render a template instead" for f in found)
    return out


def main() -> int:
    found = offences()
    for rel, items in found.items():
        for item in items:
            print(f"{rel}: {item}")
    if found:
        print(f"house rules: {sum(map(len, found.values()))} offence(s)", file=sys.stderr)
        return 1
    print("house rules: one writer per state; no markup built in console/ strings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
