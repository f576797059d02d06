"""One render function per card; the page, the action response and the live push all use these. A module per
kind: actions.py (a recovery action's card), runs.py (a run's card, its page's parts, the chain), task.py (the
header, board row, follow-ups, composer, workspace panel), start_over.py (the Start over control's context).

Every word comes from recovery.words; these modules gather the loaded rows
it needs and hands the presenter's views to the templates.
"""
