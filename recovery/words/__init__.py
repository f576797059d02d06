"""What the screen may say (DESIGN §6a): every user-facing phrase, derived from saved facts in this package.

Pages, card responses, live pushes and the API's `next_action` all call these
functions; templates only lay out what they return. Pure: the callers pass
loaded rows (runs, actions, attempts, steps) and the facts read alongside them
(the current gate, the agent's auto-resume switch); nothing here queries.

A phrase is a `Line`: a tuple of plain text, `At` (a moment, which a page shows
as relative text inside `<time>` and the API as an absolute time) and `Said`
(a person's own words, shown quoted). Words claim only what the facts show:
an acknowledgement is not a resumption, a queued run is not a continuation,
a person's statement is not a saved result.

One module per thing that is told: `lines` (the phrase type), `vocabulary`, `task` (a task's state, board
rows), `card` and `actions` (a recovery action's card), `bounds`, `runs`, `agent_runs`, `followups`,
`workspaces`, `signin`, `bulk`. Codes, arguments and OS errors become sentences in `recovery/humanize.py`,
beside this package because classification's reasons use it too.
"""
