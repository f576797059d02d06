"""The SDK's copy of the faithful-payload wire form is the server's, value for value."""

from hypothesis import given, settings
from hypothesis import strategies as st

from recovery_console import payloads as sdk
from tasks import payloads as server

text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=12)
numbers = st.integers() | st.floats(allow_nan=False, allow_infinity=False)
leaves = st.none() | st.booleans() | numbers | text | st.binary(max_size=8)
keys = text | st.sampled_from(["$text", "$bytes", "$object"])
values = st.recursive(
    leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_both_copies_encode_every_value_alike_and_decode_it_back(value):
    wire = sdk.encode(value)
    assert wire == server.encode(value)
    assert sdk.decode(wire) == server.decode(wire) == (value if not isinstance(value, bytearray) else bytes(value))
    assert sdk.canonical(wire) == server.canonical(wire)


def test_a_model_requests_digest_is_the_sha256_of_its_canonical_json():
    import hashlib
    import json

    request = {"b": [1, "a\x00b"], "a": b"\xff"}
    canonical = json.dumps(server.encode(request), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert sdk.digest(request) == hashlib.sha256(canonical.encode()).hexdigest()
    assert sdk.digest({"a": b"\xff", "b": [1, "a\x00b"]}) == sdk.digest(request)  # key order does not matter
