"""The supervisor: its loop (loop.py: one pass of every duty, each isolated), its pass records (passes.py)
and retention (retention.py)."""
