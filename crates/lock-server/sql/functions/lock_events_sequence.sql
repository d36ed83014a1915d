-- Positions for the events committed without one (C3 W1), in one transaction at a time: the
-- advisory lock is held to commit, and each statement here reads after taking it, so every
-- position a reader sees was given after every lower one was committed, and a reader that
-- resumes after a position misses nothing below the next. Events committed after this read
-- wait for the next call (every replica calls it every 50 ms: a lock write sends no
-- notification, so writers never queue on PostgreSQL's notification lock). Answers the head
-- position (never below the retention floor), and when it gave positions tells the replicas
-- on 'lock_event_head'.
CREATE OR REPLACE FUNCTION lock_events_sequence() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_head bigint;
    v_given bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('lock_events_sequence'));
    -- Rows in lock_events without a position (written by the trigger before migration 0017,
    -- or by a transaction in flight across it) join the pending ones first.
    WITH stray AS (DELETE FROM lock_events WHERE position IS NULL RETURNING *)
    INSERT INTO lock_events_pending (id, at, lock_key, kind, fencing_token, owner_id, scope, value)
    SELECT id, at, lock_key, kind, fencing_token, owner_id, scope, value FROM stray;
    WITH moved AS (DELETE FROM lock_events_pending RETURNING *),
    numbered AS (
        SELECT m.*, nextval('lock_event_positions') AS position
          FROM (SELECT * FROM moved ORDER BY id) m)
    INSERT INTO lock_events (id, position, at, lock_key, kind, fencing_token, owner_id, scope, value)
    SELECT id, position, at, lock_key, kind, fencing_token, owner_id, scope, value FROM numbered;
    GET DIAGNOSTICS v_given = ROW_COUNT;
    SELECT greatest(coalesce(max(position), 0), (SELECT floor FROM lock_event_floor))
      INTO v_head FROM lock_events;
    IF v_given > 0 THEN
        PERFORM pg_notify('lock_event_head', v_head::text);
    END IF;
    RETURN v_head;
END
$$;
