"""The reference worker on the SDK: scripted plans run with real tools (`python -m recovery_console.worker`)."""

from recovery_console.reference.agent import PlanAgent, plan_agent

__all__ = ["PlanAgent", "plan_agent"]
