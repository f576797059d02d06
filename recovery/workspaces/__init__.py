"""Workspaces: validation against the manifest (validation.py: findings, it never writes a run), the admin's
repairs (repairs.py) and exports (exports.py)."""
