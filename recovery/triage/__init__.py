"""Triage at scale (DESIGN §12): the board's filters and sort orders, the inbox, and saved views.

Reads for pages, the API and bulk previews; their query counts do not grow
with data. The filter a board lists is the filter a bulk preview resolves
(`matching_ids`), so "select all N matching this filter" acts on exactly the
tasks the board counted, never on a page of them.

filters.py (what a filter may name, parsed), board.py (the board's reads), inbox.py, saved_views.py.
"""
