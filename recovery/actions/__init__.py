"""Recovery actions and what people and the supervisor do with them (the action record itself, its one writer, is
recovery/action_log.py, below both this package and workspaces/, which opens actions too):
decisions, retries and cancels (commands.py), continuations (continuations.py), follow-ups (followups.py), start over
(start_over.py), task controls (controls.py), and attempts settled by run facts (settle.py)."""
