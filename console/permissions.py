"""Pages ask the one role check in tasks.authz."""

from tasks.authz import allows, can_admin, can_operate

__all__ = ["allows", "can_admin", "can_operate"]
