-- Wake-ups and hand-over across replicas: when a key's grant row, a share (ADR 0007) or a
-- queue place goes (release, revoke, the reaper, a closed session, a head leaving) and the key is free with a
-- live head waiter, the head is granted the key in the transaction that freed it when its own
-- acquire would have been granted at this instant (lock_store::decide::hand_over is the same
-- rule in Rust): no live or ended grant row, no lock-delay for it, and a place that names the
-- lease to grant. Its parked request learns the grant from the notification
-- 'lock_handed_over' and answers without asking again. Otherwise the head is woken
-- ('lock_free', "<session> <key>") to ask. No waiter, no notification: the uncontended path
-- pays one index probe. Notifications reach every replica's listener at commit.
--
-- The trigger never waits for a row lock: the head's place and the key's fence row are taken
-- SKIP LOCKED. A place locked by its own waiter's call in flight, or a fence row locked by an
-- acquirer of the key, means another transaction is deciding this key: the head is woken
-- instead, and its call decides (waiting there could close a cycle with an acquirer that holds
-- the fence row and waits for this transaction's grant row).
--
-- The grant begins at clock_timestamp() taken after the head's place is locked, so after the
-- commit of the waiter's last call, which wrote touched_at (its now()). The notification
-- carries that grant and the place's age (begin - touched_at): the replica credits the waiter
-- with the time before its last call plus that age, never more than it really waited (I4).
CREATE OR REPLACE FUNCTION lock_notify_free() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_at timestamptz := clock_timestamp();
    v_grant record;
    v_head record;
    v_place record;
    v_fence record;
    v_ended boolean;
    v_have_place boolean := false;
    v_have_fence boolean := false;
    v_token bigint;
    v_expires timestamptz;
BEGIN
    -- The common case first: nobody queues for this key (one index probe).
    IF NOT EXISTS (SELECT 1 FROM lock_waiters w WHERE w.lock_key = OLD.lock_key) THEN
        RETURN NULL;
    END IF;
    SELECT COALESCE(l.expires_at > v_at AND s.expires_at > v_at, false) AS live INTO v_grant
      FROM locks l LEFT JOIN lock_sessions s ON s.session_id = l.session_id
     WHERE l.lock_key = OLD.lock_key;
    IF FOUND AND v_grant.live THEN
        RETURN NULL;
    END IF;
    v_ended := FOUND OR EXISTS (SELECT 1 FROM lock_holds h WHERE h.lock_key = OLD.lock_key);
    SELECT w.session_id, w.lease_ms, w.claim INTO v_head
      FROM lock_waiters w JOIN lock_sessions s ON s.session_id = w.session_id
     WHERE w.lock_key = OLD.lock_key AND w.expires_at > v_at AND s.expires_at > v_at
     ORDER BY w.seq
     LIMIT 1;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- Readers or permits hold the key (ADR 0007): a head that asks for a share may fit
    -- beside them and is woken to ask; one that asks for the whole key waits for the last.
    IF EXISTS (SELECT 1 FROM lock_holds h JOIN lock_sessions s ON s.session_id = h.session_id
                WHERE h.lock_key = OLD.lock_key AND h.expires_at > v_at AND s.expires_at > v_at) THEN
        IF v_head.claim <> 'exclusive' THEN
            PERFORM pg_notify('lock_free', v_head.session_id::text || ' ' || OLD.lock_key);
        END IF;
        RETURN NULL;
    END IF;
    -- An ended grant row still there (its lock-delay is the acquire's to judge), a place
    -- that names no lease, or a replica that asked for no hand-over (LOCK_DB_HAND_OVER=false
    -- sets lock.hand_over on its connections): wake the head to ask.
    IF v_ended OR v_head.lease_ms IS NULL
       OR current_setting('lock.hand_over', true) = 'off' THEN
        PERFORM pg_notify('lock_free', v_head.session_id::text || ' ' || OLD.lock_key);
        RETURN NULL;
    END IF;
    SELECT w.lease_ms, w.lock_delay_ms, w.touched_at, w.expires_at, w.request_id INTO v_place
      FROM lock_waiters w
     WHERE w.lock_key = OLD.lock_key AND w.session_id = v_head.session_id
       FOR UPDATE SKIP LOCKED;
    v_have_place := FOUND;
    IF v_have_place THEN
        SELECT f.last_token, f.delay_until, f.delay_exempt INTO v_fence
          FROM lock_fences f WHERE f.lock_key = OLD.lock_key
           FOR UPDATE SKIP LOCKED;
        v_have_fence := FOUND;
    END IF;
    -- Taken after the place's lock: after its waiter's last call committed.
    v_at := clock_timestamp();
    IF NOT (v_have_place AND v_have_fence) THEN
        PERFORM pg_notify('lock_free', v_head.session_id::text || ' ' || OLD.lock_key);
        RETURN NULL;
    END IF;
    -- Under the fence row, which every grantor holds until it commits, look again: a grant
    -- or a share committed since the first looks (none was there then, live or ended) is
    -- seen now, and the key is never handed over beside it.
    IF v_place.lease_ms IS NULL OR v_place.expires_at <= v_at
       OR (v_fence.delay_until > v_at
           AND v_fence.delay_exempt IS DISTINCT FROM v_head.session_id)
       OR EXISTS (SELECT 1 FROM locks l WHERE l.lock_key = OLD.lock_key)
       OR EXISTS (SELECT 1 FROM lock_holds h WHERE h.lock_key = OLD.lock_key) THEN
        PERFORM pg_notify('lock_free', v_head.session_id::text || ' ' || OLD.lock_key);
        RETURN NULL;
    END IF;

    UPDATE lock_fences f
       SET last_token = f.last_token + 1, delay_until = NULL, delay_exempt = NULL
     WHERE f.lock_key = OLD.lock_key
    RETURNING f.last_token INTO v_token;
    v_expires := v_at + v_place.lease_ms * interval '1 millisecond';
    -- The grant is the request's that touched the place last (lock_abandon takes it back if
    -- that request ended).
    INSERT INTO locks AS l (lock_key, fencing_token, session_id, lease_ms, expires_at, lock_delay_ms,
                            request_id)
    VALUES (OLD.lock_key, v_token, v_head.session_id, v_place.lease_ms, v_expires,
            v_place.lock_delay_ms, v_place.request_id)
    ON CONFLICT (lock_key) DO UPDATE
       SET fencing_token = EXCLUDED.fencing_token,
           session_id    = EXCLUDED.session_id,
           lease_ms      = EXCLUDED.lease_ms,
           expires_at    = EXCLUDED.expires_at,
           lock_delay_ms = EXCLUDED.lock_delay_ms,
           request_id    = EXCLUDED.request_id;
    -- Its place goes (this trigger runs again for it and finds the key held).
    DELETE FROM lock_waiters w
     WHERE w.lock_key = OLD.lock_key AND w.session_id = v_head.session_id;
    -- "<session> <token> <lease_ms> <expires_at, epoch µs> <place age, ms> <key>"
    PERFORM pg_notify('lock_handed_over',
        v_head.session_id::text || ' ' || v_token || ' ' || v_place.lease_ms || ' '
        || floor(extract(epoch FROM v_expires) * 1000000)::bigint || ' '
        || GREATEST(0, floor(extract(epoch FROM v_at - v_place.touched_at) * 1000))::bigint
        || ' ' || OLD.lock_key);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER locks_notify_free AFTER DELETE ON locks
    FOR EACH ROW EXECUTE FUNCTION lock_notify_free();
CREATE OR REPLACE TRIGGER lock_waiters_notify_free AFTER DELETE ON lock_waiters
    FOR EACH ROW EXECUTE FUNCTION lock_notify_free();
CREATE OR REPLACE TRIGGER lock_holds_notify_free AFTER DELETE ON lock_holds
    FOR EACH ROW EXECUTE FUNCTION lock_notify_free();
