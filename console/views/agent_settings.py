"""The tool-settings page: one section per agent, each its own form that swaps only itself.

A section draws the saved settings, or — after a refusal, or around a reset — the
person's unsaved choices on top of them, so what they chose is never lost.
"""

from dataclasses import dataclass, field

from recovery.modes import AUTO_RESUME, REPLAY_RISK, UNKNOWN_OUTCOME, current_modes
from recovery.selectors import SettingChange
from recovery.words.agent_runs import UNKNOWN_OUTCOME_CHOICES, UNKNOWN_OUTCOME_MEANS, catalogue_line
from tasks.models import Agent, RecoveryMode, UnknownOutcome
from tasks.modes import default_mode

MODES = tuple(RecoveryMode.values)
MODE_MEANS = {
    RecoveryMode.REPLAY: "safe to run again",
    RecoveryMode.NOTIFY: "outcome unknown, a person decides",
    RecoveryMode.FORGET: "drop the unfinished call",
}
HISTORY_SHOWN = 20


@dataclass
class SettingsForm:
    """What one agent's form sent: the modes and switch as chosen, what the form showed as saved, the reason."""

    modes: dict[str, str] = field(default_factory=dict)
    was: dict[str, str] = field(default_factory=dict)
    auto_resume: bool = False
    was_auto_resume: bool | None = None
    reason: str = ""
    confirm: list[str] = field(default_factory=list)
    reset: str = ""
    unknown_outcome: str | None = None
    was_unknown_outcome: str | None = None

    @classmethod
    def parse(cls, data) -> "SettingsForm":
        modes = {k.split(":", 1)[1]: v for k, v in data.items() if k.startswith("mode:")}
        was = {k.split(":", 1)[1]: v for k, v in data.items() if k.startswith("was:")}
        was_auto = data.get("was_auto_resume")
        unknown = data.get("unknown_outcome")
        was_unknown = data.get("was_unknown_outcome")
        return cls(
            modes=modes,
            was=was,
            auto_resume=data.get("auto_resume") in ("1", "on", "true"),
            was_auto_resume=None if was_auto not in ("0", "1") else was_auto == "1",
            reason=data.get("reason", ""),
            confirm=data.getlist("confirm_replay"),
            reset=data.get("reset", ""),
            unknown_outcome=unknown if unknown in UnknownOutcome.values else None,
            was_unknown_outcome=was_unknown if was_unknown in UnknownOutcome.values else None,
        )

    def service_args(self, catalogue: dict | None = None) -> dict:
        """Arguments of `profile_update`: a reset touches only its tool; a save, everything the form sent."""
        if self.reset:
            return {
                "modes": {self.reset: default_mode(self.reset, catalogue)},
                "expected": {self.reset: self.was[self.reset]} if self.reset in self.was else None,
            }
        expected = dict(self.was)
        if self.was_auto_resume is not None:
            expected[AUTO_RESUME] = self.was_auto_resume
        if self.was_unknown_outcome is not None:
            expected[UNKNOWN_OUTCOME] = self.was_unknown_outcome
        return {
            "modes": self.modes,
            "auto_resume": self.auto_resume,
            "unknown_outcome": self.unknown_outcome,
            "reason": self.reason,
            "confirm_replay": self.confirm,
            "expected": expected,
        }

    def without_reset(self) -> "SettingsForm":
        """The choices still unsaved after a reset went through: everything but the reset tool."""
        modes = {t: m for t, m in self.modes.items() if t != self.reset}
        return SettingsForm(
            modes=modes, auto_resume=self.auto_resume, reason=self.reason, unknown_outcome=self.unknown_outcome
        )


def section_context(
    agent: Agent,
    history: list[SettingChange],
    *,
    form: SettingsForm | None = None,
    opened: bool = False,
    saved_text: str = "",
    error=None,
) -> dict:
    profile = agent.profile
    catalogue = profile.tool_catalogue
    saved = current_modes(profile.tool_modes, catalogue=catalogue)
    shown, shown_auto, reason = dict(saved), profile.auto_resume, ""
    shown_unknown = profile.unknown_outcome
    if form is not None:
        shown.update({t: m for t, m in form.modes.items() if t in saved and m in MODES})
        shown_auto, reason = form.auto_resume, form.reason
        shown_unknown = form.unknown_outcome or shown_unknown
    confirm = set(getattr(error, "tools", None) or ())
    rows = [
        {
            "tool": tool,
            "default": default_mode(tool, catalogue),
            "saved": mode,
            "mode": shown[tool],
            "override": mode != default_mode(tool, catalogue),
            "dirty": shown[tool] != mode,
            "confirm": tool in confirm,
            "description": str(((catalogue or {}).get(tool) or {}).get("description") or ""),
            "registered": tool in (catalogue or {}),
        }
        for tool, mode in saved.items()
    ]
    overrides = [r for r in rows if r["override"]]
    defaults = [r for r in rows if not r["override"]]
    dirty = (
        any(r["dirty"] for r in rows) or shown_auto != profile.auto_resume or shown_unknown != profile.unknown_outcome
    )
    return {
        "agent": agent,
        "profile": profile,
        "overrides": overrides,
        "defaults": defaults,
        "defaults_open": any(r["dirty"] or r["confirm"] for r in defaults),
        "auto_resume": shown_auto,
        "auto_resume_dirty": shown_auto != profile.auto_resume,
        "unknown_outcome": shown_unknown,
        "unknown_outcome_dirty": shown_unknown != profile.unknown_outcome,
        "unknown_outcome_choices": UNKNOWN_OUTCOME_CHOICES,
        "unknown_outcome_means": UNKNOWN_OUTCOME_MEANS,
        "unknown_outcome_saved": UNKNOWN_OUTCOME_CHOICES.get(profile.unknown_outcome, ""),
        "catalogue": catalogue_line(catalogue, profile.tools_registered_at),
        "reason": reason,
        "reason_required": bool(getattr(error, "reason_required", False)),
        "confirm_rows": [r for r in rows if r["confirm"]],
        "replay_risk": REPLAY_RISK,
        "history": history[:HISTORY_SHOWN],
        "history_more": max(0, len(history) - HISTORY_SHOWN),
        "last_change": history[0] if history else None,
        "opened": opened or dirty or error is not None or bool(saved_text),
        "dirty": dirty,
        "saved_text": saved_text,
        "error": error,
        "modes": MODES,
        "mode_means": MODE_MEANS,
    }
