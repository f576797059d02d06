"""Pure: what a person reads instead of a code, a JSON value or an operating system's error.

One humanizer each — for a call's arguments, for an OS error (an `OSError`, or the "[Errno N] …" a worker
saved as text), for a diagnosis reason — used by the presenter and by the reasons classification writes, so
the same fact reads the same wherever it shows. The code itself stays available to the page (a `title`
attribute, the details fold with the raw text) and to the API, which keeps the saved text unchanged.
"""

import errno as E
import re

from tasks.batches import item_position, parent_of

# What an errno means to someone looking at a console, not at a C header. Socket name lookups report the
# resolver's negative codes (EAI_*), which Python's socket.gaierror carries as `errno`.
ERRNO_WORDS = {
    E.ENOENT: "it does not exist",
    E.EACCES: "permission was refused (the console's user may not use it)",
    E.EPERM: "the operating system does not permit it",
    E.ENOTDIR: "a part of the path is a file, not a folder",
    E.EISDIR: "it is a folder, not a file",
    E.EEXIST: "something already exists there",
    E.ENOSPC: "the disk is full",
    E.EROFS: "the file system is read-only",
    E.ENAMETOOLONG: "the name is too long",
    E.ELOOP: "it leads through a loop of symbolic links",
    E.EXDEV: "it is on another file system",
    E.ENOTEMPTY: "the folder is not empty",
    E.EIO: "the disk reported a read or write error",
    E.ECONNREFUSED: "the server refused the connection (nothing listens there)",
    E.ECONNRESET: "the server closed the connection in the middle",
    E.ETIMEDOUT: "the connection timed out",
    E.EHOSTUNREACH: "the server cannot be reached from here",
    E.ENETUNREACH: "the network is unreachable from here",
    -2: "the server's name could not be found (the DNS lookup failed)",
    -3: "the server's name could not be looked up just now (a temporary DNS failure)",
    -5: "the server's name has no address (DNS)",
    -9: "the server's name could not be looked up for this kind of address (DNS)",
}

_ERRNO = re.compile(r"\[Errno (-?\d+)\] ([^:\[\]\"'<>]+?)(?:: '([^']*)')?(?=$|[.;,)\]\"'>]|\s-|\s\()")


def os_error_text(number: int | None, strerror: str = "", filename: str | None = None) -> str:
    """ "/srv/out/report.md: the disk is full" — an OS error as a sentence fragment; the operating system's own
    words where this console has none of its own."""
    words = ERRNO_WORDS.get(number) if number is not None else None
    words = words or (strerror[:1].lower() + strerror[1:] if strerror else "the operating system refused it")
    return f"{filename}: {words}" if filename else words


def error_text(text: str) -> str:
    """Saved error text with every "[Errno N] Strerror: 'file'" in it said in words ("" stays "")."""
    if not text or "[Errno" not in text:
        return text

    def say(m: re.Match) -> str:
        return os_error_text(int(m.group(1)), m.group(2).strip(), m.group(3))

    return _ERRNO.sub(say, text)


def _value(value, width: int = 40) -> str:
    if isinstance(value, str):
        shown = value if len(value) <= width else value[: width - 1] + "…"
        return f"“{shown}”"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "empty"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple):
        return "1 item" if len(value) == 1 else f"{len(value)} items"
    if isinstance(value, dict):
        return "1 field" if len(value) == 1 else f"{len(value)} fields"
    return "a value"


def args_text(args, limit: int = 160) -> str:
    """A call's arguments for a sentence: `path “report.md”, content “# Report”` (never JSON); the whole
    value is in the step's details fold and the API."""
    if not isinstance(args, dict):
        return "arguments that cannot be read"
    if not args:
        return "no arguments"
    text = ", ".join(f"{key} {_value(value)}" for key, value in args.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def call_words(tool: str, args) -> str:
    """ "file_write with path “report.md”, content “# Report”" — a call inside a sentence."""
    shown = args_text(args)
    return f"{tool} with {shown}" if shown != "no arguments" else f"{tool} with no arguments"


def step_name(seq: int | None) -> str:
    """ "step 3", or "item 2 of step 1" for a nested call (its number holds its parent's)."""
    if not seq:
        return ""
    parent = parent_of(seq)
    return f"item {item_position(seq, parent)} of step {parent}" if parent is not None else f"step {seq}"


def reason_text(code: str, detail: str, seq: int | None) -> str:
    """A diagnosis reason as one sentence: its detail (OS errors said in words), led by the step it is about
    when the detail does not already name it. The code is the caller's to put in a `title`."""
    text = error_text((detail or "").strip()) or code.replace("_", " ").capitalize() + "."
    where = step_name(seq)
    if where and not re.search(r"\b(step|item)s? \d", text, re.I):
        text = f"{where[:1].upper()}{where[1:]}: {text}"
    return text
