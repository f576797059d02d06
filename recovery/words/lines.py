"""A phrase as the screen gets it: a `Line` of plain text, `At` (a moment) and `Said` (a person's own words)."""

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class At:
    when: datetime


@dataclass(frozen=True)
class Said:
    text: str


Part = str | At | Said
Line = tuple[Part, ...]


def plain(line: Line | None) -> str:
    """A line as plain text (API, logs, tests): moments as absolute UTC times, words in quotes."""
    if not line:
        return ""
    out = []
    for part in line:
        if isinstance(part, At):
            out.append(part.when.strftime("%Y-%m-%d %H:%M UTC"))
        elif isinstance(part, Said):
            out.append(f"“{part.text}”")
        else:
            out.append(part)
    return "".join(out)


def said_part(text: str) -> tuple:
    return (": ", Said(text)) if text else ()
