-- Generated from crates/lock-server/sql/functions/ by tests/it/sql_functions.rs: edit
-- those files, not this one. Restates: lock_event, lock_events_sequence.

-- Watching (C3 W1): every grant's start and end and every proclaim, one row each, written by
-- the triggers of lock_event() in the transaction that made the change; a position is given
-- by lock_events_sequence(), in the order the rows are found committed. Written by hand,
-- above the generated text.
CREATE TABLE lock_events (
    id            bigserial   PRIMARY KEY,
    position      bigint      UNIQUE,
    at            timestamptz NOT NULL DEFAULT now(),
    lock_key      text        NOT NULL,
    kind          text        NOT NULL
                  CHECK (kind IN ('granted', 'released', 'expired', 'revoked', 'proclaimed')),
    fencing_token bigint      NOT NULL CHECK (fencing_token > 0),
    owner_id      text,
    scope         text,
    value         text
);
CREATE INDEX lock_events_unpositioned ON lock_events (id) WHERE position IS NULL;
CREATE INDEX lock_events_at ON lock_events (at) WHERE position IS NOT NULL;
CREATE SEQUENCE lock_event_positions;
-- Positions at or below floor are forgotten (the reaper's retention): a watcher after a lower
-- one is told of a gap.
CREATE TABLE lock_event_floor (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    floor bigint  NOT NULL
);
INSERT INTO lock_event_floor (floor) VALUES (0);

-- Watching (C3 W1): every grant's start and end and every value a grant announces, one row
-- of lock_events each, written by the transaction that made the change, so no path can
-- forget it: a grant row inserted (an acquire, a hand-over, a set's member, a share) is
-- 'granted'; one deleted ended as the transaction says in the setting lock.ending ('revoked'
-- by a revoke, 'expired' by the reaper), else 'expired' when its lease had ended and
-- 'released' otherwise; a row whose token changed (a take-over of an ended grant) is both. A
-- row of lock_values written is 'proclaimed'. The rows have no position yet:
-- lock_events_sequence gives them one, in the order it finds them committed. No notification:
-- a notifying commit queues on PostgreSQL's one notification lock, and the lock path stays
-- off it.
CREATE OR REPLACE FUNCTION lock_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_ending text := nullif(current_setting('lock.ending', true), '');
    v_scope text;
BEGIN
    IF TG_TABLE_NAME = 'lock_values' THEN
        INSERT INTO lock_events (lock_key, kind, fencing_token, value)
        VALUES (NEW.lock_key, 'proclaimed', NEW.fencing_token, NEW.value);
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.fencing_token = NEW.fencing_token THEN
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO lock_events (lock_key, kind, fencing_token)
        VALUES (OLD.lock_key,
                CASE WHEN TG_OP = 'UPDATE' THEN 'expired'
                     ELSE coalesce(v_ending,
                                   CASE WHEN OLD.expires_at <= now() THEN 'expired' ELSE 'released' END)
                END,
                OLD.fencing_token);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        IF TG_TABLE_NAME = 'lock_holds' THEN
            v_scope := CASE WHEN NEW.slot IS NULL THEN 'shared' ELSE 'permit-' || NEW.slot END;
        END IF;
        INSERT INTO lock_events (lock_key, kind, fencing_token, owner_id, scope)
        SELECT NEW.lock_key, 'granted', NEW.fencing_token, s.owner_id, v_scope
          FROM lock_sessions s WHERE s.session_id = NEW.session_id;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER locks_event AFTER INSERT OR UPDATE OF fencing_token OR DELETE ON locks
    FOR EACH ROW EXECUTE FUNCTION lock_event();
CREATE OR REPLACE TRIGGER lock_holds_event AFTER INSERT OR DELETE ON lock_holds
    FOR EACH ROW EXECUTE FUNCTION lock_event();
CREATE OR REPLACE TRIGGER lock_values_event AFTER INSERT OR UPDATE ON lock_values
    FOR EACH ROW EXECUTE FUNCTION lock_event();

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
    WITH todo AS (
        SELECT id FROM lock_events WHERE position IS NULL ORDER BY id FOR UPDATE),
    numbered AS (
        SELECT id, nextval('lock_event_positions') AS position
          FROM (SELECT id FROM todo ORDER BY id) t)
    UPDATE lock_events e SET position = n.position FROM numbered n WHERE e.id = n.id;
    GET DIAGNOSTICS v_given = ROW_COUNT;
    SELECT greatest(coalesce(max(position), 0), (SELECT floor FROM lock_event_floor))
      INTO v_head FROM lock_events;
    IF v_given > 0 THEN
        PERFORM pg_notify('lock_event_head', v_head::text);
    END IF;
    RETURN v_head;
END
$$;
