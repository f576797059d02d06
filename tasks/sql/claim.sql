-- The claim on PostgreSQL in one statement (tasks/transitions.py `claim_queued_run`).
-- Placeholders: {run_t} {task_t} {dep_t} {msg_t} {agent_t} {event_t} {instance_t} {org_t} tables;
-- {queued}/{running} and {run_from} the run's move (RUNS' table); {task_from}/{in_progress} the task's (TASKS');
-- {open_tasks} the open task statuses; {done} a finished dependency; {waiting} a waiting follow-up;
-- {run_columns} {task_columns} {org_columns} {agent_columns} the columns returned; {claimed_kind} the event's kind.

-- name: claim_run
WITH candidate AS (
    SELECT r.id, r.continues_id, t.parent_id AS task_parent_id,
           EXISTS (SELECT 1 FROM {msg_t} m WHERE m.task_id = r.task_id AND m.status = '{waiting}') AS has_waiting
    FROM {run_t} r JOIN {task_t} t ON t.id = r.task_id
    WHERE r.org_id = %(org)s AND r.status = '{queued}'
      AND NOT t.paused
      AND t.status IN ({open_tasks})
      AND (t.budget_limit IS NULL OR t.budget_used < t.budget_limit)
      AND (t.workspace_label = '' OR t.workspace_label = %(held)s)
      AND NOT EXISTS (
          SELECT 1 FROM {dep_t} d JOIN {task_t} dt ON dt.id = d.to_task_id
          WHERE d.from_task_id = r.task_id AND dt.status <> '{done}')
      AND r.id <> ALL(%(skipped)s::bigint[])
      AND (%(kinds)s::text[] IS NULL OR r.kind = ANY(%(kinds)s::text[]))
      AND (%(agents)s::text[] IS NULL OR r.agent_id IN (
          SELECT ag.id FROM {agent_t} ag WHERE ag.org_id = %(org)s AND ag.name = ANY(%(agents)s::text[])))
    ORDER BY r.queued_since, r.id
    LIMIT 1
    FOR UPDATE OF r SKIP LOCKED
), claimed AS (
    UPDATE {run_t} r
    SET status = '{running}', lease_worker_id = %(worker)s, lease_owner = %(owner)s,
        lease_epoch = r.lease_epoch + 1, lease_expires_at = %(expires)s, started_at = %(now)s
    FROM candidate c
    WHERE r.id = c.id AND r.status IN ({run_from})
      AND c.task_parent_id IS NULL AND c.continues_id IS NULL AND NOT c.has_waiting
    RETURNING r.*
), moved AS (
    UPDATE {task_t} t
    SET status = CASE WHEN t.status IN ({task_from}) THEN '{in_progress}' ELSE t.status END,
        updated_at = %(now)s
    FROM claimed
    WHERE t.id = claimed.task_id
    RETURNING t.*
), event AS (
    INSERT INTO {event_t} (org_id, task_id, run_id, kind, actor, payload, created_at)
    SELECT claimed.org_id, claimed.task_id, claimed.id, '{claimed_kind}', %(actor)s,
           jsonb_build_object('epoch', claimed.lease_epoch, 'owner', claimed.lease_owner,
                              'attempt', claimed.attempt, 'continues', claimed.continues_id,
                              'messages_delivered', '[]'::jsonb),
           %(now)s
    FROM claimed
), seen AS (
    -- The instance's poll, when due (%(seen)s: the poll; %(seen_claim)s: a claim, if this one claims).
    INSERT INTO {instance_t}
        (org_id, worker_id, instance, first_seen_at, last_seen_at, last_claim_at)
    SELECT %(org)s, %(worker)s, %(label)s, %(now)s, %(now)s,
           CASE WHEN %(seen_claim)s AND EXISTS (SELECT 1 FROM claimed) THEN %(now)s::timestamptz END
    WHERE %(seen)s OR (%(seen_claim)s AND EXISTS (SELECT 1 FROM claimed))
    ON CONFLICT (worker_id, instance) DO UPDATE
    SET last_seen_at = EXCLUDED.last_seen_at,
        last_claim_at = COALESCE(EXCLUDED.last_claim_at, {instance_t}.last_claim_at)
)
SELECT c.id, claimed.id IS NOT NULL, {run_columns}, {task_columns}, {org_columns}, {agent_columns}
FROM candidate c
LEFT JOIN claimed ON claimed.id = c.id
LEFT JOIN moved ON moved.id = claimed.task_id
LEFT JOIN {org_t} o ON o.id = moved.org_id
LEFT JOIN {agent_t} a ON a.id = claimed.agent_id
