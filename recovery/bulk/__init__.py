"""Bulk operations (DESIGN §12): previews frozen into items and executed item by item (operations.py), their reads
(selectors.py) and HTTP (api.py); what an action does to one task is a pure rule (recovery/rules/bulk.py)."""
