"""The faithful-payload wire form, the SDK's own copy of the server's `tasks/payloads.py` (no Django here).

tests/sdk/test_payloads.py checks that both copies give the same wire form for the same values.

A checkpoint holds what a tool was given and what it returned: text with NUL
characters (`printf 'a\\000b'`), strings with lone surrogates, bytes that are not
UTF-8 (binary output). JSON text can spell some of these (`"\\u0000"`,
`"\\ud800"`) but PostgreSQL's `jsonb` and `text` cannot store them, UTF-8 cannot
carry a lone surrogate, and JSON has no bytes at all. So every payload is kept
in its **wire form**, a JSON value in which every string and object key is
plain text (no NUL, no surrogate code point), with three tags — an object whose
only key is one of:

- `{"$text": "<escaped>"}` — a string holding NUL or a lone surrogate;
  `<escaped>` is the string's JSON escape form (RFC 8259 §7) in ASCII, without
  the quotes: `"a\\u0000b"` is `{"$text": "a\\\\u0000b"}`;
- `{"$bytes": "<base64>"}` — a byte string (RFC 4648 base64, padded);
- `{"$object": [[key, value], ...]}` — an object that cannot be written as
  itself: a key that is not plain text, or an object that would read as a tag
  (its only key is `$text`, `$bytes` or `$object`); pairs in key order.

`encode()` turns a Python value (str of any code points, bytes, dict, list,
int, float, bool, None) into wire form; `decode()` turns it back, exactly.
`canonical()` = encode(decode(v)): what the console stores for any JSON it is
given — a plain JSON string with NUL (`"a\\u0000b"`) and its `$text` form are the
same value and are kept as the `$text` form. It is idempotent.

Limits, enforced by every function here (`PayloadError` says which):
nesting at most MAX_DEPTH levels, lists and objects at most MAX_ITEMS entries,
numbers finite.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from typing import Any

TEXT, BYTES, OBJECT = "$text", "$bytes", "$object"
TAGS = frozenset({TEXT, BYTES, OBJECT})
MAX_DEPTH = 64
MAX_ITEMS = 100_000

# What PostgreSQL text cannot hold, and UTF-8 cannot carry.
_UNSAFE = re.compile("[\x00\ud800-\udfff]")


class PayloadError(ValueError):
    """A value that has no wire form (too deep, too long, not finite) or a malformed tag."""


def is_plain(text: str) -> bool:
    """Whether `text` can be stored as itself (no NUL, no surrogate code point)."""
    return _UNSAFE.search(text) is None


def _escape(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)[1:-1]


def encode(value: Any, *, _depth: int = 0) -> Any:
    """The wire form of a Python value."""
    if _depth > MAX_DEPTH:
        raise PayloadError(f"nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(f"a number must be finite, not {value!r}")
        return value
    if isinstance(value, str):
        return value if is_plain(value) else {TEXT: _escape(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {BYTES: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, list | tuple):
        if len(value) > MAX_ITEMS:
            raise PayloadError(f"a list holds at most {MAX_ITEMS} items")
        return [encode(item, _depth=_depth + 1) for item in value]
    if isinstance(value, dict):
        if len(value) > MAX_ITEMS:
            raise PayloadError(f"an object holds at most {MAX_ITEMS} keys")
        for key in value:
            if not isinstance(key, str):
                raise PayloadError(f"an object key must be a string, not {type(key).__name__}")
        if all(is_plain(k) for k in value) and not (len(value) == 1 and next(iter(value)) in TAGS):
            return {k: encode(v, _depth=_depth + 1) for k, v in value.items()}
        pairs = sorted(value.items())
        return {OBJECT: [[encode(k, _depth=_depth + 2), encode(v, _depth=_depth + 2)] for k, v in pairs]}
    raise PayloadError(f"{type(value).__name__} has no JSON form")


def decode(value: Any, *, _depth: int = 0) -> Any:
    """The Python value of a wire form (plain JSON decodes to itself)."""
    if _depth > MAX_DEPTH:
        raise PayloadError(f"nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(f"a number must be finite, not {value!r}")
        return value
    if isinstance(value, list):
        if len(value) > MAX_ITEMS:
            raise PayloadError(f"a list holds at most {MAX_ITEMS} items")
        return [decode(item, _depth=_depth + 1) for item in value]
    if not isinstance(value, dict):
        raise PayloadError(f"{type(value).__name__} is not a JSON value")
    if len(value) > MAX_ITEMS:
        raise PayloadError(f"an object holds at most {MAX_ITEMS} keys")
    if len(value) == 1:
        tag, body = next(iter(value.items()))
        if tag == TEXT:
            return _decode_text(body)
        if tag == BYTES:
            return _decode_bytes(body)
        if tag == OBJECT:
            return _decode_object(body, _depth)
    return {k: decode(v, _depth=_depth + 1) for k, v in value.items()}


def _decode_text(body: Any) -> str:
    if not isinstance(body, str):
        raise PayloadError('"$text" holds the JSON escape form of a string')
    try:
        return json.loads(f'"{body}"')
    except ValueError as exc:
        raise PayloadError(f'"$text" is not a JSON-escaped string: {exc}') from None


def _decode_bytes(body: Any) -> bytes:
    if not isinstance(body, str):
        raise PayloadError('"$bytes" holds a base64 string')
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise PayloadError('"$bytes" is not valid base64') from None


def _decode_object(body: Any, depth: int) -> dict:
    if not isinstance(body, list) or len(body) > MAX_ITEMS:
        raise PayloadError(f'"$object" holds a list of at most {MAX_ITEMS} [key, value] pairs')
    out = {}
    for pair in body:
        if not isinstance(pair, list) or len(pair) != 2:
            raise PayloadError('"$object" holds [key, value] pairs')
        key = decode(pair[0], _depth=depth + 2)
        if not isinstance(key, str):
            raise PayloadError('an "$object" key is a string')
        out[key] = decode(pair[1], _depth=depth + 2)
    return out


def is_object(value: Any) -> bool:
    """Whether a wire-form value is an object (a `$text` or `$bytes` tag is a string or bytes)."""
    return isinstance(value, dict) and not (len(value) == 1 and next(iter(value)) in (TEXT, BYTES))


def canonical(value: Any) -> Any:
    """The stored form of any JSON value: unsafe strings tagged, tags kept as they are. Idempotent."""
    return encode(decode(value))


def loads(text: str | bytes) -> Any:
    """Parse JSON text (strict: no NaN or Infinity, finite numbers) into its canonical wire form."""

    def refuse(constant):
        raise PayloadError(f"{constant} is not a JSON number")

    def number(literal: str) -> float:
        value = float(literal)
        if not math.isfinite(value):
            raise PayloadError(f"the number {literal[:40]} is too large for a double")
        return value

    try:
        parsed = json.loads(text, parse_constant=refuse, parse_float=number)
    except RecursionError:
        raise PayloadError(f"nested deeper than {MAX_DEPTH} levels") from None
    return canonical(parsed)


def readable(text: str) -> str:
    """A sentence (an error message) as plain text: NUL and lone surrogates spelled as escapes."""
    if is_plain(text):
        return text
    return _UNSAFE.sub(lambda m: _escape(m.group()), text)


def canonical_json(value: Any) -> str:
    """The one text of a value for comparing calls: its wire form as compact JSON with sorted keys."""
    return json.dumps(encode(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(value: Any) -> str:
    """sha256 hex of `canonical_json(value)`: a model request's digest, and how replay compares arguments."""
    import hashlib

    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
