"""What a live page receives: out-of-band fragments rendered from saved state.

Synchronous and ORM-backed; the relay and the consumer call these in a thread.
Every fragment is the same partial the page itself uses, so a pushed update and
a reload draw the same HTML.

access.py (who may watch), snapshots.py (a page from saved state), updates.py (what an event changes),
relay.py (one event relay per web process), consumers.py (the websockets), ops.py (the workers page's timer
socket).
"""
