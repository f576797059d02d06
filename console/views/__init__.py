"""The console's pages, a module per page family: task_pages.py (task and run pages, their cards' and header's
POST handlers), triage.py (board, inbox, saved views), bulk.py (bulk preview, operation page, history),
settings_pages.py and agent_settings.py (sign-in locks, export roots, tool and agent settings), accounts.py
(sign-in, sign-out, passwords), ops.py (the workers page), refusals.py (403, 404, 400 pages)."""
