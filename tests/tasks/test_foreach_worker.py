"""The reference worker's foreach (on the SDK), against a fake runner API: items as nested steps, saved items
taken as they were."""

from pathlib import Path

import pytest

from recovery_console import Outcome
from recovery_console.reference.faults import Faults, parse_faults
from tests.tasks.tool_client import FakeClient, claim_for, execute


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


class RecordingClient(FakeClient):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.planned: dict[int, tuple] = {}

    def plan(self, run, epoch, seq, tool, args, parent_seq=None, *, dispatch=False, give_up=None):
        self.planned[seq] = (tool, args, parent_seq)
        return super().plan(run, epoch, seq, tool, args, parent_seq=parent_seq)

    def completed(self, seq):
        return next(c for c in self.calls if c[0] == "complete" and c[1] == seq)


def foreach(items, tool, args):
    return {"tool": "foreach", "args": {"items": items, "do": {"tool": tool, "args": args}}}


def test_each_item_is_a_nested_step_with_its_arguments_and_results_keep_item_order(ws: Path) -> None:
    client = RecordingClient()
    steps = [foreach(["a", "b", "c"], "file_write", {"path": "{{item}}.txt", "content": "{{item}}"})]
    assert execute(client, claim_for(ws, steps)) is Outcome.SUCCEEDED
    assert [c[:2] for c in client.written()] == [
        ("plan", 1),
        ("dispatch", 1),
        *[(kind, 100_000 + i) for i in (1, 2, 3) for kind in ("plan", "dispatch", "complete")],
        ("complete", 1),
        ("finish", "succeeded"),
    ]
    assert client.planned[100_002] == ("file_write", {"path": "b.txt", "content": "b"}, 1)
    result = client.completed(1)[3]
    assert result == {"results": [{"bytes": 1}] * 3, "failed": [], "dropped": [], "usage": 0}
    assert sorted(p.name for p in ws.glob("*.txt")) == ["a.txt", "b.txt", "c.txt"]


def test_saved_items_are_taken_as_they_were_a_failure_stays_failed(ws: Path) -> None:
    client = RecordingClient()
    steps = [foreach(["a", "b", "c", "d"], "file_write", {"path": "{{item}}.txt", "content": "x"})]
    claim = claim_for(
        ws,
        steps,
        reused=[
            {"seq": 100_001, "result": {"bytes": 9}, "ok": True},
            {"seq": 100_002, "result": None, "ok": False, "error": "disk full"},
        ],
        dropped=[{"seq": 100_003, "parent_seq": 1, "tool": "file_write"}],
    )
    assert execute(client, claim) is Outcome.FAILED
    assert sorted(s for s in client.planned if s > 1) == [100_004]  # only the item never started
    assert sorted(p.name for p in ws.glob("*.txt")) == ["d.txt"]
    _, _, ok, result, error, usage, _ = client.completed(1)
    assert not ok and usage == 0
    assert result == {
        "results": [{"bytes": 9}, None, None, {"bytes": 1}],
        "failed": [{"item": 2, "error": "disk full"}],
        "dropped": [3],
        "usage": 0,
    }
    assert error == "1 of 4 items failed; item 2: disk full"
    assert client.written()[-1] == ("finish", "failed", "step_failed")


def test_an_item_that_fails_does_not_stop_the_batch(ws: Path) -> None:
    client = RecordingClient()
    steps = [foreach(["missing", "here"], "file_read", {"path": "{{item}}.txt"}), {"tool": "list_files"}]
    (ws / "here.txt").write_text("yes")
    assert execute(client, claim_for(ws, steps)) is Outcome.FAILED
    assert client.completed(100_001)[2] is False and client.completed(100_002)[2] is True
    assert client.completed(1)[3]["results"] == [None, {"content": "yes"}]
    assert 2 not in client.planned  # the run ends with the failed batch


@pytest.mark.parametrize("inner", ["subagent", "foreach"])
def test_an_item_cannot_open_a_group_of_its_own(ws: Path, inner: str) -> None:
    client = RecordingClient()
    assert execute(client, claim_for(ws, [foreach([1], inner, {})])) is Outcome.FAILED
    assert list(client.planned) == [1]
    assert f"cannot be a {inner}" in client.completed(1)[4]


def test_a_foreach_in_a_subagent_runs_its_items_inside_its_own_step(ws: Path) -> None:
    client = RecordingClient()
    inner = foreach(["a", "b"], "file_write", {"path": "{{item}}.txt", "content": "1"})
    steps = [{"tool": "subagent", "args": {"agent": "scout", "input": {"steps": [inner]}}}]
    assert execute(client, claim_for(ws, steps)) is Outcome.SUCCEEDED
    assert list(client.planned) == [1, 100_001]  # no item steps: the nested foreach is one call
    assert client.completed(100_001)[3] == {
        "results": [{"bytes": 1}, {"bytes": 1}],
        "failed": [],
        "dropped": [],
        "usage": 2,
    }
    assert sorted(p.name for p in ws.glob("*.txt")) == ["a.txt", "b.txt"]


def test_worker_fault_addresses_an_item_by_its_nested_seq(ws: Path) -> None:
    class Crash(BaseException):
        pass

    def crash(code: int) -> None:
        raise Crash(code)

    client = RecordingClient()
    steps = [foreach(["a", "b", "c"], "file_write", {"path": "{{item}}.txt", "content": "x"})]
    with pytest.raises(Crash):
        execute(client, claim_for(ws, steps), Faults(parse_faults("crash_after_dispatch:100002"), exit=crash))
    assert client.written()[-1] == ("dispatch", 100_002)
    assert sorted(p.name for p in ws.glob("*.txt")) == ["a.txt"]
