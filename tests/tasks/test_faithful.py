"""Any tool argument or output — NUL, lone surrogates, invalid UTF-8, binary — is checkpointed on both
databases and reads back byte for byte (tasks/payloads.py); what has no wire form is refused with 400."""

import json

import pytest
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from recovery_console.reference.tools import ToolContext, bash, file_read, file_write
from tasks import payloads
from tasks.models import Run, Step
from tests.helpers import claim, plan

# Any code point, surrogates included: what a Python str can hold.
any_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=20)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
values = st.recursive(
    scalars | any_text | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=20,
)


def _plain_everywhere(value) -> bool:
    if isinstance(value, str):
        return payloads.is_plain(value)
    if isinstance(value, list):
        return all(_plain_everywhere(v) for v in value)
    if isinstance(value, dict):
        return all(payloads.is_plain(k) and _plain_everywhere(v) for k, v in value.items())
    return True


@settings(max_examples=300, deadline=None)
@given(values)
def test_every_value_has_a_plain_wire_form_that_decodes_to_it_exactly(value):
    wire = payloads.encode(value)
    assert _plain_everywhere(wire)
    json.dumps(wire, ensure_ascii=False).encode("utf-8")  # UTF-8 can carry it: no surrogate left
    assert payloads.decode(wire) == value
    assert payloads.canonical(wire) == wire
    assert payloads.loads(json.dumps(wire)) == wire


def test_the_tags_are_the_documented_ones():
    assert payloads.encode("a\x00b") == {"$text": "a\\u0000b"}
    assert payloads.encode(b"\xff\x00") == {"$bytes": "/wA="}
    assert payloads.encode({"k\x00": 1}) == {"$object": [[{"$text": "k\\u0000"}, 1]]}
    # An object that would read as a tag is escaped, so it comes back as the object it was.
    assert payloads.encode({"$bytes": "aGk="}) == {"$object": [["$bytes", "aGk="]]}
    assert payloads.decode({"$object": [["$bytes", "aGk="]]}) == {"$bytes": "aGk="}
    # Plain JSON with a NUL (what an external client may send) is the same value as its tagged form.
    assert payloads.loads('{"s": "a\\u0000b"}') == {"s": {"$text": "a\\u0000b"}}


@pytest.mark.parametrize(
    "text, problem",
    [
        ("[" * 100 + "]" * 100, "nested deeper"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper"),
        ("[" + ",".join(["0"] * (payloads.MAX_ITEMS + 1)) + "]", "at most"),
        ('{"n": 1e400}', "too large"),
        ('{"n": NaN}', "not a JSON number"),
        ('{"b": {"$bytes": "not base64!"}}', "base64"),
        ('{"t": {"$text": 7}}', "escape form"),
        ('{"o": {"$object": [[1, 2]]}}', "key is a string"),
    ],
)
def test_what_has_no_wire_form_is_refused_saying_why(text, problem):
    with pytest.raises(payloads.PayloadError, match=problem):
        payloads.loads(text)


# --- the tools keep raw bytes ----------------------------------------------------------------


def test_bash_keeps_a_nul_as_text_and_bytes_it_cannot_decode_as_bytes(tmp_path):
    ctx = ToolContext(workspace=str(tmp_path))
    out = bash(ctx, {"command": "printf 'a\\000b'; printf '\\377\\376' >&2"})
    assert out["stdout"] == "a\x00b" and out["stderr"] == b"\xff\xfe"
    assert payloads.encode(out)["stderr"] == {"$bytes": "//4="}


def test_file_write_takes_bytes_and_file_read_gives_them_back(tmp_path):
    ctx = ToolContext(workspace=str(tmp_path))
    blob = bytes(range(256))
    args = payloads.decode({"path": "blob.bin", "content": {"$bytes": payloads.encode(blob)["$bytes"]}})
    assert file_write(ctx, args) == {"bytes": 256}
    assert (tmp_path / "blob.bin").read_bytes() == blob
    assert file_read(ctx, {"path": "blob.bin"}) == {"content": blob}


# --- through the runner API, on this database -----------------------------------------------


def raw(client, path: str, body) -> object:
    """POST JSON text as an external client writes it: `\\u0000` and lone surrogates as JSON escapes."""
    return client.post(path, json.dumps(body, ensure_ascii=True), content_type="application/json")


def test_a_nul_binary_and_a_lone_surrogate_are_checkpointed_and_read_back_exactly(api, runner, agent, operator):
    args = {"command": "printf 'a\\000b'", "note": "lone \ud800 surrogate", "k\x00ey": "v"}
    r = raw(api, "/api/tasks/", {"title": "odd bytes", "agent": "builder", "input": plan(("bash", args))})
    assert r.status_code == 201, r.content
    c = claim(runner)
    rid, epoch = c["run"], c["lease_epoch"]
    assert payloads.decode(c["input"]["steps"][0]["args"]) == args

    step = {"epoch": epoch, "seq": 1, "tool": "bash", "args": payloads.encode(args)}
    assert runner.post(f"/api/runner/runs/{rid}/steps/", step, format="json").status_code == 201
    # The worker plans the arguments it was given: the same value, so the same step (idempotent re-plan).
    assert raw(runner, f"/api/runner/runs/{rid}/steps/", {**step, "args": args}).status_code == 201
    assert runner.post(f"/api/runner/runs/{rid}/steps/1/dispatch/", {"epoch": epoch}, format="json").status_code == 200
    result = {"exit_code": 0, "stdout": "a\x00b", "stderr": b"\xff\xfe\x00", "echo": "\udcff"}
    body = {"epoch": epoch, "ok": True, "result": payloads.encode(result)}
    r = runner.post(f"/api/runner/runs/{rid}/steps/1/complete/", body, format="json")
    assert r.status_code == 200, r.content

    saved = Step.objects.get(run_id=rid, seq=1)
    assert payloads.decode(saved.result) == result and payloads.decode(saved.args) == args
    shown = api.get(f"/api/runs/{rid}/").json()["steps"][0]
    assert payloads.decode(shown["result"]) == result and payloads.decode(shown["args"]) == args
    # The task and run pages draw it too: no 500 on what UTF-8 cannot carry, each odd value shown escaped.
    browser = Client()
    browser.force_login(operator)
    run = Run.objects.get(pk=rid)
    for url in (f"/tasks/{run.task_id}/", f"/agents/builder/runs/{rid}/"):
        page = browser.get(url)
        assert page.status_code == 200, url
        assert "\x00" not in page.text
    page = browser.get(f"/agents/builder/runs/{rid}/").text
    # The run page shows the saved values in their wire form: NUL and lone surrogates escaped, bytes as base64.
    assert "&quot;$text&quot;: &quot;a\\\\u0000b&quot;" in page  # stdout
    assert "&quot;$bytes&quot;: &quot;//4A&quot;" in page  # stderr
    assert "&quot;$text&quot;: &quot;lone \\\\ud800 surrogate&quot;" in page  # an argument


def test_a_nul_in_a_plain_json_result_is_kept_not_refused(runner, api, agent):
    raw(api, "/api/tasks/", {"title": "t", "agent": "builder", "input": plan(("bash", {"command": "true"}))})
    c = claim(runner)
    rid, epoch = c["run"], c["lease_epoch"]
    runner.post(
        f"/api/runner/runs/{rid}/steps/",
        {"epoch": epoch, "seq": 1, "tool": "bash", "args": {"command": "true"}},
        format="json",
    )
    runner.post(f"/api/runner/runs/{rid}/steps/1/dispatch/", {"epoch": epoch}, format="json")
    r = raw(runner, f"/api/runner/runs/{rid}/steps/1/complete/", {"epoch": epoch, "ok": True, "result": {"o": "\x00"}})
    assert r.status_code == 200, r.content
    assert payloads.decode(Step.objects.get(run_id=rid, seq=1).result) == {"o": "\x00"}


@pytest.mark.parametrize(
    "title",
    ["nul \x00 title", "lone \udc80 surrogate"],
    ids=["nul", "surrogate"],
)
def test_text_fields_refuse_what_text_cannot_hold(api, agent, title):
    r = raw(api, "/api/tasks/", {"title": title, "agent": "builder", "input": plan(("sleep", {"seconds": 0}))})
    assert r.status_code == 400, r.content
    assert r.json()["code"] == "invalid" and "title" in r.json()["errors"]


@pytest.mark.parametrize(
    "text",
    [
        '{"title": "t", "agent": "builder", "input": ' + "[" * 5000 + "]" * 5000 + "}",
        '{"title": "t", "agent": "builder", "input": {"steps": [], "n": 1e999}}',
        b'{"title": "\xff\xfe"}',
    ],
    ids=["deep", "huge_float", "invalid_utf8"],
)
def test_malformed_json_is_a_400_with_its_code(api, agent, text):
    r = api.post("/api/tasks/", text, content_type="application/json")
    assert r.status_code == 400, r.content
    assert r.json()["code"] == "invalid"
