-- Watching (C3 W1): every grant's start and end and every value a grant announces, one row
-- of lock_events each, written by the transaction that made the change, so no path can
-- forget it: a grant row inserted (an acquire, a hand-over, a set's member, a share) is
-- 'granted'; one deleted ended as the transaction says in the setting lock.ending ('revoked'
-- by a revoke, 'expired' by the reaper), else 'expired' when its lease had ended and
-- 'released' otherwise; a row whose token changed (a take-over of an ended grant) is both. A
-- row of lock_values written is 'proclaimed'. The rows go to lock_events_pending, a table
-- without an index (the cheapest write the lock path can make): lock_events_sequence moves
-- them to lock_events with a position, in the order it finds them committed. No notification:
-- a notifying commit queues on PostgreSQL's one notification lock, and the lock path stays
-- off it.
CREATE OR REPLACE FUNCTION lock_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_ending text := nullif(current_setting('lock.ending', true), '');
    v_scope text;
BEGIN
    IF TG_TABLE_NAME = 'lock_values' THEN
        INSERT INTO lock_events_pending (lock_key, kind, fencing_token, value)
        VALUES (NEW.lock_key, 'proclaimed', NEW.fencing_token, NEW.value);
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.fencing_token = NEW.fencing_token THEN
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO lock_events_pending (lock_key, kind, fencing_token)
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
        INSERT INTO lock_events_pending (lock_key, kind, fencing_token, owner_id, scope)
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
