"""An agent's tool catalogue: the tools its worker registers, with their default recovery modes (DESIGN §13).

The catalogue replaces the built-in tool list for that agent: a step's mode at plan time is the admin's
override, else the catalogue's mode, else the built-in default, else forget (tasks.modes), and
classification judges "the tool is no longer available" against it. `model` is reserved (always
replay): it is never in a catalogue.
"""

import re
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from tasks.errors import Invalid, NotFound
from tasks.events import event_append
from tasks.models import Agent, AgentProfile, RecoveryMode, Worker
from tasks.modes import RESERVED_TOOLS, default_mode, mode_for

TOOL_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
MAX_TOOLS = 500
MAX_DESCRIPTION = 2_000


@dataclass(frozen=True)
class CatalogueTool:
    name: str
    default_mode: str
    mode: str  # the effective one: an admin's override wins
    description: str

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "default_mode": self.default_mode,
            "mode": self.mode,
            "description": self.description,
        }


def catalogue_tools(profile: AgentProfile) -> list[CatalogueTool]:
    """Pure over the loaded profile: its registered tools by name, each with its default and effective mode."""
    catalogue = profile.tool_catalogue or {}
    return [
        CatalogueTool(
            name=name,
            default_mode=default_mode(name, catalogue),
            mode=mode_for(name, profile.tool_modes, catalogue),
            description=str((catalogue.get(name) or {}).get("description") or ""),
        )
        for name in sorted(catalogue)
    ]


def _validated(tools) -> dict[str, dict]:
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise Invalid(f"`tools` must be a list of at most {MAX_TOOLS} tools.", field="tools")
    catalogue: dict[str, dict] = {}
    for i, tool in enumerate(tools, start=1):
        if not isinstance(tool, dict):
            raise Invalid(f"Tool {i} must be an object with `name` and `mode`.", field="tools")
        name, mode, description = tool.get("name"), tool.get("mode"), tool.get("description") or ""
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise Invalid(f"Tool {i}: {name!r} is not a tool name (letters, digits, _ . : -).", field="tools")
        if name in RESERVED_TOOLS:
            raise Invalid(f"{name} is reserved for model turns (always replayed); it is not registered.", field="tools")
        if name in catalogue:
            raise Invalid(f"{name} is listed twice.", field="tools")
        if mode not in RecoveryMode.values:
            raise Invalid(f"{name}: {mode!r} is not a recovery mode (replay, notify or forget).", field="tools")
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
            raise Invalid(f"{name}: a description is text of at most {MAX_DESCRIPTION} characters.", field="tools")
        catalogue[name] = {"mode": mode, "description": description}
    return catalogue


def catalogue_changes(before: dict | None, after: dict) -> dict:
    """Pure: what a registration changed (tools added, removed, whose mode or description moved)."""
    before = before or {}
    added = [{"name": n, "mode": after[n]["mode"]} for n in sorted(set(after) - set(before))]
    removed = sorted(set(before) - set(after))
    modes = [
        {"name": n, "from": (before[n] or {}).get("mode"), "to": after[n]["mode"]}
        for n in sorted(set(after) & set(before))
        if (before[n] or {}).get("mode") != after[n]["mode"]
    ]
    described = [
        n
        for n in sorted(set(after) & set(before))
        if ((before[n] or {}).get("description") or "") != after[n]["description"]
    ]
    return {"added": added, "removed": removed, "modes": modes, "descriptions": described}


@transaction.atomic
def tools_register(*, worker: Worker, agent: str, tools) -> tuple[Agent, list[CatalogueTool]]:
    """Replace the catalogue of `agent` (an agent of the worker's organization, else NotFound) with `tools`.

    One `tools_registered` event says what changed (none when nothing did: a worker registers at every start).
    Steps already planned keep the mode they were planned with; overrides are kept.
    """
    target = Agent.objects.filter(org_id=worker.org_id, name=agent).first() if isinstance(agent, str) else None
    if target is None:
        raise NotFound(f"No agent {agent!r} in this organization.")
    catalogue = _validated(tools)
    AgentProfile.objects.get_or_create(agent=target)
    profile = AgentProfile.objects.select_for_update().get(agent=target)
    changes = catalogue_changes(profile.tool_catalogue, catalogue)
    first = profile.tool_catalogue is None
    now = timezone.now()
    AgentProfile.objects.filter(pk=profile.pk).update(tool_catalogue=catalogue, tools_registered_at=now)
    profile.tool_catalogue, profile.tools_registered_at = catalogue, now
    if first or any(changes.values()):
        event_append(
            org_id=target.org_id,
            kind="tools_registered",
            actor=worker,
            payload={"agent": target.name, "agent_id": target.pk, "first": first, **changes},
        )
    return target, catalogue_tools(profile)
