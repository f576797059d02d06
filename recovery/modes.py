"""Per-agent-profile recovery-mode overrides and the auto-resume switch (admin)."""

from django.db import transaction

from tasks.errors import Invalid
from tasks.events import event_append
from tasks.models import AgentProfile, RecoveryMode
from tasks.modes import DEFAULT_MODES, KNOWN_TOOLS, mode_for

__all__ = ["DEFAULT_MODES", "KNOWN_TOOLS", "mode_for", "profile_update"]


@transaction.atomic
def profile_update(*, actor, profile: AgentProfile, modes: dict[str, str], auto_resume: bool) -> AgentProfile:
    """Set the profile's overrides. A mode equal to the tool's default is stored as no override.

    Steps already planned keep the mode they were planned with: history is not rewritten.
    """
    overrides = {}
    for tool, mode in modes.items():
        if mode not in RecoveryMode.values:
            raise Invalid(f"{mode!r} is not a recovery mode (replay, notify or forget).", field=tool)
        if mode != mode_for(tool):
            overrides[tool] = mode
    profile = AgentProfile.objects.select_for_update().get(pk=profile.pk)
    before = {"tool_modes": profile.tool_modes, "auto_resume": profile.auto_resume}
    AgentProfile.objects.filter(pk=profile.pk).update(tool_modes=overrides, auto_resume=bool(auto_resume))
    profile.refresh_from_db()
    after = {"tool_modes": profile.tool_modes, "auto_resume": profile.auto_resume}
    if before != after:
        event_append(
            org_id=profile.agent.org_id,
            kind="profile_updated",
            actor=actor,
            payload={"agent": profile.agent.name, "before": before, "after": after},
        )
    return profile
