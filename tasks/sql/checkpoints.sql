-- The common checkpoint writes (tasks/checkpoints.py): one statement each, so one round trip and one commit.
-- Placeholders: {run_t} {task_t} {step_t} {event_t} {profile_t} tables; {step_columns} the step's columns as
-- `s."col"`; {leased} / {running} the run statuses a worker may write in; {planned} a step's first phase;
-- {dispatched} and {dispatch_from} the move planned → dispatched; {complete_from} the phases a completion
-- moves from (its target, completed or failed, is the %(phase)s parameter); {modes} the recovery modes.

-- name: held_run
-- The fenced lock of the run: held by this worker at this epoch, leased, not lapsed ({extra}: more conditions).
SELECT r.id, r.org_id, r.task_id, r.agent_id, r.status FROM {run_t} r
WHERE r.id = %(run)s AND r.org_id = %(org)s AND r.lease_worker_id = %(worker)s
  AND r.lease_epoch = %(epoch)s AND r.status IN ({statuses}) AND r.lease_expires_at > %(now)s{extra}
FOR UPDATE

-- name: step_event
INSERT INTO {event_t} (org_id, task_id, run_id, kind, actor, payload, created_at)
SELECT r.org_id, r.task_id, r.id, {kind}, %(actor)s, {payload}, %(now)s FROM s, r

-- name: plan_step
-- A top-level step planned for the first time (a repeat conflicts and writes nothing).
WITH r AS ({held}),
s AS (
    INSERT INTO {step_t}
        (run_id, seq, parent_id, parent_seq, tool, args, recovery_mode, phase, result, error, usage,
         usage_detail, reused_from_id, dispatch_epoch, planned_at, dispatched_at, completed_at)
    SELECT r.id, %(seq)s, NULL, NULL, %(tool)s::text, %(args)s::jsonb,
           -- tasks.modes.mode_for: the admin's override, else the registered catalogue's mode, else the default
           COALESCE((SELECT CASE
                         WHEN p.tool_modes ->> %(tool)s::text IN ({modes}) THEN p.tool_modes ->> %(tool)s::text
                         WHEN p.tool_catalogue -> %(tool)s::text ->> 'mode' IN ({modes})
                             THEN p.tool_catalogue -> %(tool)s::text ->> 'mode'
                     END
                     FROM {profile_t} p WHERE p.agent_id = r.agent_id),
                    %(default_mode)s),
           '{planned}', NULL, '', 0, NULL, NULL, NULL, %(now)s, NULL, NULL
    FROM r
    ON CONFLICT (run_id, seq) DO NOTHING
    RETURNING *
), e AS ({event})
SELECT {step_columns} FROM s

-- name: dispatch_step
WITH r AS ({held}),
s AS (
    UPDATE {step_t} s
    SET phase = '{dispatched}', dispatched_at = %(now)s, dispatch_epoch = %(epoch)s
    FROM r
    WHERE s.run_id = r.id AND s.seq = %(seq)s AND s.phase IN ({dispatch_from})
    RETURNING s.*
), e AS ({event})
SELECT {step_columns} FROM s

-- name: complete_step
-- The outcome of a step that changes no workspace file, of a run whose task has no budget limit.
WITH r AS ({held}),
s AS (
    UPDATE {step_t} s
    SET phase = %(phase)s, result = %(result)s::jsonb, error = %(error)s, usage = %(usage)s::integer,
        usage_detail = %(usage_detail)s::jsonb, completed_at = %(now)s
    FROM r
    WHERE s.run_id = r.id AND s.seq = %(seq)s AND s.phase IN ({complete_from})
      AND s.tool <> ALL(%(manifest_tools)s::text[])
    RETURNING s.*
), t AS (
    UPDATE {task_t} t SET budget_used = t.budget_used + %(usage)s::integer, updated_at = %(now)s
    FROM s, r
    WHERE t.id = r.task_id AND %(usage)s::integer > 0
), e AS ({event})
SELECT {step_columns}, r.status FROM s, r
