"""Per-agent recovery-mode overrides, the auto-resume switch and who settles an agent run's unknown outcome
(admin), with guard rails and a history.

A change is decided by pure functions (`profile_changes`, `Change.needs_confirmation`)
and applied by one service, `profile_update`, which appends one `profile_updated`
event carrying each change (tool, from, to) and the person's reason. The history
of an agent's settings is read back from those events (`recovery.selectors.profile_history`).
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction

from tasks.errors import Invalid, ServiceError, StaleVersion
from tasks.events import event_append
from tasks.models import AgentProfile, RecoveryMode, UnknownOutcome
from tasks.modes import DEFAULT_MODES, KNOWN_TOOLS, RESERVED_TOOLS, default_mode, mode_for

__all__ = [
    "AUTO_RESUME",
    "DEFAULT_MODES",
    "KNOWN_TOOLS",
    "REPLAY_RISK",
    "UNKNOWN_OUTCOME",
    "Change",
    "ConfirmationRequired",
    "current_modes",
    "mode_for",
    "profile_changes",
    "profile_update",
]

AUTO_RESUME = "auto_resume"
UNKNOWN_OUTCOME = "unknown_outcome"
SWITCHES = (AUTO_RESUME, UNKNOWN_OUTCOME)
UNKNOWN_OUTCOME_WORDS = {UnknownOutcome.ASK_PERSON: "ask a person", UnknownOutcome.TELL_AGENT: "tell the agent"}
# What replay means for a tool whose outcome is otherwise left to a person.
REPLAY_RISK = "a call cut off after dispatch will run again automatically; it may happen twice"
REASON_MAX = 1000
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")


def on_off(value: bool) -> str:
    return "on" if value else "off"


@dataclass(frozen=True)
class Change:
    """One setting of one agent moving from `before` to `after`.

    `tool` is None for an agent-wide switch (`switch`: auto-resume, or who settles an unknown outcome); `base` is
    the tool's mode without an override (registered in its catalogue, or built in).
    """

    tool: str | None
    before: str | bool
    after: str | bool
    base: str | None = field(default=None, compare=False)
    switch: str = AUTO_RESUME

    @property
    def setting(self) -> str:
        return self.switch if self.tool is None else "tool_mode"

    @property
    def default(self) -> str | None:
        if self.tool is None:
            return None
        return self.base or mode_for(self.tool)

    @property
    def needs_confirmation(self) -> bool:
        """A tool whose outcome a person verifies by default would now be run again by itself."""
        return self.tool is not None and self.default == RecoveryMode.NOTIFY and self.after == RecoveryMode.REPLAY

    @property
    def needs_reason(self) -> bool:
        return self.needs_confirmation or self.tool is None

    @property
    def text(self) -> str:
        if self.tool is None and self.switch == UNKNOWN_OUTCOME:
            before = UNKNOWN_OUTCOME_WORDS.get(self.before, self.before)
            return f"unknown outcomes of agent runs: {before} → {UNKNOWN_OUTCOME_WORDS.get(self.after, self.after)}"
        if self.tool is None:
            return f"auto-resume: {on_off(bool(self.before))} → {on_off(bool(self.after))}"
        return f"{self.tool}: {self.before} → {self.after}"

    def as_payload(self) -> dict:
        if self.tool is None and self.switch == UNKNOWN_OUTCOME:
            return {"setting": UNKNOWN_OUTCOME, "from": self.before, "to": self.after}
        if self.tool is None:
            return {"setting": AUTO_RESUME, "from": bool(self.before), "to": bool(self.after)}
        return {"setting": "tool_mode", "tool": self.tool, "from": self.before, "to": self.after}


class ConfirmationRequired(ServiceError):
    """The save needs more from the person: the replay risk accepted for `tools`, and/or a reason."""

    code = "confirmation_required"
    status_code = 409

    def __init__(self, detail: str, *, tools: list[str], reason_required: bool):
        super().__init__(detail, tools=tools, reason_required=reason_required)
        self.tools = tools
        self.reason_required = reason_required


def current_modes(overrides: dict | None, tools: Iterable[str] = (), catalogue: dict | None = None) -> dict[str, str]:
    """Every tool of the agent (its registered catalogue, else the built-in ones; plus any overridden or named
    one) with the mode it resolves to."""
    overrides = overrides or {}
    known = set(catalogue) if catalogue is not None else set(KNOWN_TOOLS)
    names = sorted(known | set(overrides) | set(tools))
    return {tool: mode_for(tool, overrides, catalogue) for tool in names}


def profile_changes(
    *,
    overrides: dict,
    auto_resume: bool,
    modes: dict[str, str],
    auto_resume_to: bool | None = None,
    expected: dict | None = None,
    catalogue: dict | None = None,
    unknown_outcome: str | None = None,
    unknown_outcome_to: str | None = None,
) -> tuple[list[Change], list[str]]:
    """Pure: what a save changes, and which of its changes collide with a save made meanwhile.

    `modes`, `auto_resume_to` and `unknown_outcome_to` are what the person submitted; `expected` (optional)
    is what their form showed as saved (tool → mode, `auto_resume`, `unknown_outcome`). With
    `expected`, a setting the person left as it was is not a change at all — a
    concurrent save of that setting by someone else is kept — and a setting the
    person changed collides when its saved value moved since the form was drawn.
    """
    changes: list[Change] = []
    collisions: list[str] = []
    wanted = [(tool, modes[tool], mode_for(tool, overrides, catalogue), tool) for tool in sorted(modes)]
    if auto_resume_to is not None:
        wanted.append((None, auto_resume_to, auto_resume, AUTO_RESUME))
    if unknown_outcome_to is not None:
        wanted.append((None, unknown_outcome_to, unknown_outcome, UNKNOWN_OUTCOME))
    for tool, to, now, key in wanted:
        if expected is not None and key in expected:
            if to == expected[key]:
                continue
            if now != expected[key]:
                collisions.append(key)
                continue
        if to != now:
            base = default_mode(tool, catalogue) if tool is not None else None
            changes.append(Change(tool, now, to, base=base, switch=key if tool is None else AUTO_RESUME))
    return changes, collisions


def _validate(modes: dict[str, str]) -> None:
    for tool, mode in modes.items():
        if not isinstance(tool, str) or not TOOL_NAME.match(tool):
            raise Invalid(f"{tool!r} is not a tool name.", field="modes")
        if tool in RESERVED_TOOLS:
            raise Invalid(f"{tool} turns are always replayed: their mode cannot be changed.", field=tool)
        if mode not in RecoveryMode.values:
            raise Invalid(f"{mode!r} is not a recovery mode (replay, notify or forget).", field=tool)


@dataclass
class ProfileSaved:
    profile: AgentProfile
    changes: list[Change]

    @property
    def text(self) -> str:
        return "; ".join(c.text for c in self.changes) if self.changes else "nothing changed"


@transaction.atomic
def profile_update(
    *,
    actor,
    profile: AgentProfile,
    modes: dict[str, str] | None = None,
    auto_resume: bool | None = None,
    reason: str = "",
    confirm_replay: Iterable[str] = (),
    expected: dict | None = None,
    unknown_outcome: str | None = None,
) -> ProfileSaved:
    """Change an agent's tool modes, its auto-resume switch and/or who settles an unknown outcome of its agent
    runs (`ask_person`, or `tell_agent`: the supervisor hands each to the agent to verify); one
    `profile_updated` event per save.

    A mode equal to the tool's default is stored as no override (a reset). Refuses:
    an unknown mode, a mode for `model` or an unknown `unknown_outcome` (`invalid`); moving a tool whose
    default is notify to replay unless that tool is in `confirm_replay` and a reason is given, or switching
    auto-resume or the unknown-outcome setting without a reason (`confirmation_required`); a setting the person
    changed that someone else saved since `expected` was read (`stale_version`).
    Steps already planned keep the mode they were planned with: history is not rewritten.
    """
    modes = dict(modes or {})
    _validate(modes)
    if unknown_outcome is not None and unknown_outcome not in UnknownOutcome.values:
        raise Invalid("`unknown_outcome` must be ask_person or tell_agent.", field="unknown_outcome")
    reason = (reason or "").strip()
    if len(reason) > REASON_MAX:
        raise Invalid(f"A reason is at most {REASON_MAX} characters.", field="reason")
    profile = AgentProfile.objects.select_for_update(of=("self",)).select_related("agent").get(pk=profile.pk)
    overrides = dict(profile.tool_modes or {})
    catalogue = profile.tool_catalogue
    changes, collisions = profile_changes(
        overrides=overrides,
        auto_resume=profile.auto_resume,
        modes=modes,
        auto_resume_to=auto_resume,
        expected=expected,
        catalogue=catalogue,
        unknown_outcome=profile.unknown_outcome,
        unknown_outcome_to=unknown_outcome,
    )
    if collisions:
        saved = current_modes(overrides, collisions, catalogue)

        def now_is(c: str) -> str:
            if c == AUTO_RESUME:
                return f"auto-resume is now {on_off(profile.auto_resume)}"
            if c == UNKNOWN_OUTCOME:
                return f"unknown outcomes now {UNKNOWN_OUTCOME_WORDS.get(profile.unknown_outcome)}"
            return f"{c} is now {saved[c]}"

        told = ", ".join(now_is(c) for c in collisions)
        raise StaleVersion(
            f"Someone saved {profile.agent.name}'s settings since this form was drawn ({told}). "
            "Your choices are kept below; check them and save again.",
            settings=collisions,
        )
    unconfirmed = [c.tool for c in changes if c.needs_confirmation and c.tool not in set(confirm_replay)]
    reason_missing = any(c.needs_reason for c in changes) and not reason
    if unconfirmed or reason_missing:
        parts = []
        if unconfirmed:
            parts.append(f"Moving {', '.join(unconfirmed)} to replay needs your confirmation: {REPLAY_RISK}.")
        if reason_missing:
            parts.append("Say why in the reason; it is kept in the history.")
        raise ConfirmationRequired(" ".join(parts), tools=unconfirmed, reason_required=reason_missing)
    if not changes:
        return ProfileSaved(profile, [])

    for c in changes:
        if c.tool is None:
            continue
        if c.after == c.default:
            overrides.pop(c.tool, None)
        else:
            overrides[c.tool] = c.after
    after_auto = next((bool(c.after) for c in changes if c.setting == AUTO_RESUME), profile.auto_resume)
    after_unknown = next((c.after for c in changes if c.setting == UNKNOWN_OUTCOME), profile.unknown_outcome)
    before = {
        "tool_modes": profile.tool_modes,
        "auto_resume": profile.auto_resume,
        "unknown_outcome": profile.unknown_outcome,
    }
    updated = AgentProfile.objects.filter(pk=profile.pk).update(
        tool_modes=overrides, auto_resume=after_auto, unknown_outcome=after_unknown
    )
    assert updated == 1  # the row is locked above
    profile.refresh_from_db()
    event_append(
        org_id=profile.agent.org_id,
        kind="profile_updated",
        actor=actor,
        payload={
            "agent": profile.agent.name,
            "agent_id": profile.agent_id,
            "changes": [c.as_payload() for c in changes],
            "reason": reason,
            "before": before,
            "after": {
                "tool_modes": profile.tool_modes,
                "auto_resume": profile.auto_resume,
                "unknown_outcome": profile.unknown_outcome,
            },
        },
    )
    return ProfileSaved(profile, changes)


def changes_of(payload: dict) -> list[Change]:
    """Pure: the changes a `profile_updated` event records (events written before per-change payloads: diffed)."""
    if isinstance(payload.get("changes"), list):
        return [
            Change(None, c.get("from"), c.get("to"), switch=c["setting"])
            if c.get("setting") in SWITCHES
            else Change(c.get("tool"), c.get("from"), c.get("to"))
            for c in payload["changes"]
            if isinstance(c, dict)
        ]
    before, after = payload.get("before") or {}, payload.get("after") or {}
    old, new = before.get("tool_modes") or {}, after.get("tool_modes") or {}
    tools = set(old) | set(new)
    changes = [
        Change(tool, mode_for(tool, old), mode_for(tool, new))
        for tool in sorted(tools)
        if mode_for(tool, old) != mode_for(tool, new)
    ]
    if "auto_resume" in before and before.get("auto_resume") != after.get("auto_resume"):
        changes.append(Change(None, bool(before["auto_resume"]), bool(after.get("auto_resume"))))
    return changes


def modes_now(
    steps,
    *,
    overrides: dict | None,
    subagent_overrides: dict[str, dict | None],
    catalogue: dict | None = None,
    subagent_catalogues: dict[str, dict | None] | None = None,
) -> dict[int, str]:
    """Pure: step pk → the mode it would be planned with now, for each step whose saved mode differs.

    Resolved as `tasks.services.step_plan` resolves it: a subagent's nested calls
    take the subagent's profile, every other step the run's agent's profile.
    """
    by_seq = {s.seq: s for s in steps}
    drift = {}
    for s in steps:
        parent = by_seq.get(s.parent_seq) if s.parent_seq is not None else None
        own, registered = overrides, catalogue
        if parent is not None and parent.tool == "subagent":
            name = (parent.args or {}).get("agent")
            own = subagent_overrides.get(name, overrides) if isinstance(name, str) else overrides
            registered = (subagent_catalogues or {}).get(name) if isinstance(name, str) else None
        now = mode_for(s.tool, own, registered)
        if s.recovery_mode and now != s.recovery_mode:
            drift[s.pk] = now
    return drift


def subagent_names(steps) -> set[str]:
    """Pure: the agents whose profiles resolve the run's nested subagent calls."""
    parents = {s.parent_seq for s in steps if s.parent_seq is not None}
    return {
        s.args.get("agent")
        for s in steps
        if s.seq in parents and s.tool == "subagent" and isinstance((s.args or {}).get("agent"), str)
    }
