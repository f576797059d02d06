"""The tool-settings page: one section per agent, each its own form that swaps only itself.

A section draws the saved settings, or — after a refusal, or around a reset — the
person's unsaved choices on top of them, so what they chose is never lost.
"""

from dataclasses import dataclass, field

from recovery.modes import AUTO_RESUME, REPLAY_RISK, current_modes, mode_for
from recovery.selectors import SettingChange
from tasks.models import Agent, RecoveryMode

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

    @classmethod
    def parse(cls, data) -> "SettingsForm":
        modes = {k.split(":", 1)[1]: v for k, v in data.items() if k.startswith("mode:")}
        was = {k.split(":", 1)[1]: v for k, v in data.items() if k.startswith("was:")}
        was_auto = data.get("was_auto_resume")
        return cls(
            modes=modes,
            was=was,
            auto_resume=data.get("auto_resume") in ("1", "on", "true"),
            was_auto_resume=None if was_auto not in ("0", "1") else was_auto == "1",
            reason=data.get("reason", ""),
            confirm=data.getlist("confirm_replay"),
            reset=data.get("reset", ""),
        )

    def service_args(self) -> dict:
        """Arguments of `profile_update`: a reset touches only its tool; a save, everything the form sent."""
        if self.reset:
            return {
                "modes": {self.reset: mode_for(self.reset)},
                "expected": {self.reset: self.was[self.reset]} if self.reset in self.was else None,
            }
        expected = dict(self.was)
        if self.was_auto_resume is not None:
            expected[AUTO_RESUME] = self.was_auto_resume
        return {
            "modes": self.modes,
            "auto_resume": self.auto_resume,
            "reason": self.reason,
            "confirm_replay": self.confirm,
            "expected": expected,
        }

    def without_reset(self) -> "SettingsForm":
        """The choices still unsaved after a reset went through: everything but the reset tool."""
        modes = {t: m for t, m in self.modes.items() if t != self.reset}
        return SettingsForm(modes=modes, auto_resume=self.auto_resume, reason=self.reason)


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
    saved = current_modes(profile.tool_modes)
    shown, shown_auto, reason = dict(saved), profile.auto_resume, ""
    if form is not None:
        shown.update({t: m for t, m in form.modes.items() if t in saved and m in MODES})
        shown_auto, reason = form.auto_resume, form.reason
    confirm = set(getattr(error, "tools", None) or ())
    rows = [
        {
            "tool": tool,
            "default": mode_for(tool),
            "saved": mode,
            "mode": shown[tool],
            "override": mode != mode_for(tool),
            "dirty": shown[tool] != mode,
            "confirm": tool in confirm,
        }
        for tool, mode in saved.items()
    ]
    overrides = [r for r in rows if r["override"]]
    defaults = [r for r in rows if not r["override"]]
    dirty = any(r["dirty"] for r in rows) or shown_auto != profile.auto_resume
    return {
        "agent": agent,
        "profile": profile,
        "overrides": overrides,
        "defaults": defaults,
        "defaults_open": any(r["dirty"] or r["confirm"] for r in defaults),
        "auto_resume": shown_auto,
        "auto_resume_dirty": shown_auto != profile.auto_resume,
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
