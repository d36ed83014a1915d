-- Hand-over: a freed key goes to its live head waiter in the transaction that freed it.
--
-- A release used to cost two flushes in series on a contended key: the release's commit,
-- then the woken waiter's own acquire. Now the trigger that woke the head (lock_notify_free,
-- on a grant row or a queue place going: release, revoke, the reaper, a closed session, a
-- head leaving) grants it the key when its own acquire would have been granted at this
-- instant (lock_store::decide::hand_over is the same rule in Rust): no live or ended grant
-- row, no lock-delay for it, and a place that names the lease to grant. Its parked request
-- learns the grant from the notification 'lock_handed_over' and answers without asking again.
-- Otherwise the head is woken as before ('lock_free').
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

-- NULL for places written before this migration (woken, not handed over).
ALTER TABLE lock_waiters
    ADD COLUMN lease_ms      bigint CHECK (lease_ms > 0),
    ADD COLUMN lock_delay_ms bigint CHECK (lock_delay_ms >= 0),
    ADD COLUMN touched_at    timestamptz;

CREATE OR REPLACE FUNCTION lock_acquire(p_key text, p_session uuid, p_lease_ms bigint,
                             p_queue_ms bigint, p_lock_delay_ms bigint)
RETURNS TABLE (outcome text, fencing_token bigint, lease_ms bigint, expires_at timestamptz,
               took_over boolean, wait_ms bigint, ahead bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_session_expires timestamptz;
    v_cur record;
    v_found boolean;
    v_fence record;
    v_delay_until timestamptz;
    v_seq bigint;
    v_ahead bigint;
BEGIN
    SELECT s.expires_at INTO v_session_expires
      FROM lock_sessions s WHERE s.session_id = p_session;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'SESSION_UNKNOWN'::text, NULL::bigint, NULL::bigint, NULL::timestamptz, false, NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    IF v_session_expires <= now() THEN
        RETURN QUERY SELECT 'SESSION_EXPIRED'::text, NULL::bigint, NULL::bigint, NULL::timestamptz, false, NULL::bigint, NULL::bigint;
        RETURN;
    END IF;

    IF p_queue_ms > 0 THEN
        -- A release, revoke or reap of the grant that is in flight now could not see this
        -- place (not committed yet), so its wake-up would name nobody, and the look below
        -- would still see the grant: the waiter would sleep until its recheck. FOR KEY SHARE
        -- conflicts only with deleting the grant row: such a delete either commits first (and
        -- the look below sees the key free) or waits for this transaction (and its wake-up
        -- sees this place). Taken before the place, so that a wait here holds nothing.
        PERFORM 1 FROM locks l WHERE l.lock_key = p_key FOR KEY SHARE;
        -- The place names the grant its waiter asks for (a hand-over grants exactly that)
        -- and when this call touched it (a hand-over's grant begins after it).
        INSERT INTO lock_waiters AS w (lock_key, session_id, expires_at, lease_ms, lock_delay_ms,
                                       touched_at)
        VALUES (p_key, p_session, now() + p_queue_ms * interval '1 millisecond', p_lease_ms,
                p_lock_delay_ms, now())
        ON CONFLICT (lock_key, session_id) DO UPDATE
           SET expires_at    = GREATEST(w.expires_at, EXCLUDED.expires_at),
               lease_ms      = EXCLUDED.lease_ms,
               lock_delay_ms = EXCLUDED.lock_delay_ms,
               touched_at    = EXCLUDED.touched_at;
    END IF;

    -- First look, without a write: somebody else holds it, or this session does; and
    -- whether anybody queues for the key at all (in the same statement: the uncontended
    -- path pays no separate queue query).
    SELECT l.fencing_token, l.session_id, LEAST(l.expires_at, s.expires_at) AS ends_at,
           COALESCE(l.expires_at > now() AND s.expires_at > now(), false) AS live,
           EXISTS (SELECT 1 FROM lock_waiters q WHERE q.lock_key = p_key) AS queued
      INTO v_cur
      FROM (SELECT 1) AS one
      LEFT JOIN locks l ON l.lock_key = p_key
      LEFT JOIN lock_sessions s ON s.session_id = l.session_id;
    IF v_cur.live AND v_cur.session_id <> p_session THEN
        RETURN QUERY SELECT 'LOCK_HELD'::text, v_cur.fencing_token, NULL::bigint, v_cur.ends_at, false,
               ceil(extract(epoch FROM v_cur.ends_at - now()) * 1000)::bigint, NULL::bigint;
        RETURN;
    END IF;
    -- Same session again: the same grant (idempotent retry of L4). Lease and expiry only
    -- grow, so every answer satisfies expires_at >= now() + lease_ms (I4).
    IF v_cur.live THEN
        IF v_cur.queued THEN
            DELETE FROM lock_waiters w WHERE w.lock_key = p_key AND w.session_id = p_session;
        END IF;
        RETURN QUERY SELECT r.*, 0::bigint, NULL::bigint
                       FROM lock_regrant(p_key, v_cur.fencing_token, p_lease_ms) r;
        IF FOUND THEN RETURN; END IF;
    END IF;

    -- FIFO: live waiters of other sessions queued before this one (all, if it has no place).
    IF v_cur.queued THEN
    WITH mine AS (SELECT m.seq FROM lock_waiters m
                   WHERE m.lock_key = p_key AND m.session_id = p_session)
    SELECT (SELECT seq FROM mine),
           (SELECT count(*)
              FROM lock_waiters w JOIN lock_sessions s ON s.session_id = w.session_id
             WHERE w.lock_key = p_key AND w.session_id <> p_session
               AND w.seq < COALESCE((SELECT seq FROM mine), 9223372036854775807)
               AND w.expires_at > now() AND s.expires_at > now())
      INTO v_seq, v_ahead;
    IF v_ahead = 1 AND p_queue_ms > 0 THEN
        -- The one place ahead may be leaving now (its waiter gave up, its deadline passed):
        -- that delete's wake-up cannot see this place (not committed) and names nobody. Lock
        -- it FOR KEY SHARE: a delete committed first hides it (this caller is the head), one
        -- still running waits for this transaction and then wakes this place.
        PERFORM 1
           FROM lock_waiters w JOIN lock_sessions s ON s.session_id = w.session_id
          WHERE w.lock_key = p_key AND w.session_id <> p_session
            AND w.seq < COALESCE(v_seq, 9223372036854775807)
            AND w.expires_at > now() AND s.expires_at > now()
            FOR KEY SHARE OF w;
        IF NOT FOUND THEN
            v_ahead := 0;
        END IF;
    END IF;
    IF v_ahead > 0 THEN
        RETURN QUERY SELECT 'QUEUED'::text, NULL::bigint, NULL::bigint, NULL::timestamptz, false,
               NULL::bigint, v_ahead;
        RETURN;
    END IF;
    END IF;

    -- Take the key's fence row (serialises grantors) and draw the next token.
    UPDATE lock_fences f SET last_token = f.last_token + 1
     WHERE f.lock_key = p_key
    RETURNING f.last_token, f.delay_until, f.delay_exempt INTO v_fence;
    IF NOT FOUND THEN
        INSERT INTO lock_fences AS f (lock_key, last_token) VALUES (p_key, 1)
        ON CONFLICT (lock_key) DO UPDATE SET last_token = f.last_token + 1
        RETURNING f.last_token, f.delay_until, f.delay_exempt INTO v_fence;
    END IF;

    -- Decide again under the fence row lock: a concurrent grantor may have won meanwhile.
    SELECT l.fencing_token, l.session_id, l.lock_delay_ms,
           LEAST(l.expires_at, s.expires_at) AS ends_at,
           (l.expires_at > now() AND s.expires_at > now()) AS live
      INTO v_cur
      FROM locks l JOIN lock_sessions s ON s.session_id = l.session_id
     WHERE l.lock_key = p_key;
    v_found := FOUND;
    IF v_found AND v_cur.live THEN
        IF v_cur.session_id = p_session THEN
            RETURN QUERY SELECT r.*, 0::bigint, NULL::bigint
                           FROM lock_regrant(p_key, v_cur.fencing_token, p_lease_ms) r;
        ELSE
            RETURN QUERY SELECT 'LOCK_HELD'::text, v_cur.fencing_token, NULL::bigint, v_cur.ends_at, false,
                   ceil(extract(epoch FROM v_cur.ends_at - now()) * 1000)::bigint, NULL::bigint;
        END IF;
        RETURN;
    END IF;

    -- Lock-delay: of the dead grant still in the table (from its end), and of one already
    -- removed (on the fence row). Refused after drawing a token: that number is skipped.
    v_delay_until := NULL;
    IF v_found AND v_cur.session_id <> p_session AND v_cur.lock_delay_ms > 0 THEN
        v_delay_until := v_cur.ends_at + v_cur.lock_delay_ms * interval '1 millisecond';
    END IF;
    IF v_fence.delay_until IS NOT NULL AND v_fence.delay_exempt IS DISTINCT FROM p_session THEN
        v_delay_until := GREATEST(v_delay_until, v_fence.delay_until);
    END IF;
    IF v_delay_until > now() THEN
        RETURN QUERY SELECT 'LOCK_DELAYED'::text, NULL::bigint, NULL::bigint, NULL::timestamptz, false,
               ceil(extract(epoch FROM v_delay_until - now()) * 1000)::bigint, NULL::bigint;
        RETURN;
    END IF;
    IF v_fence.delay_until IS NOT NULL THEN
        UPDATE lock_fences f SET delay_until = NULL, delay_exempt = NULL WHERE f.lock_key = p_key;
    END IF;

    -- The grant first, then the queue place: the place's delete trigger then sees the key
    -- held and wakes nobody.
    RETURN QUERY
    INSERT INTO locks AS l (lock_key, fencing_token, session_id, lease_ms, expires_at, lock_delay_ms)
    VALUES (p_key, v_fence.last_token, p_session, p_lease_ms,
            now() + p_lease_ms * interval '1 millisecond', p_lock_delay_ms)
    ON CONFLICT (lock_key) DO UPDATE
       SET fencing_token = EXCLUDED.fencing_token,
           session_id    = EXCLUDED.session_id,
           lease_ms      = EXCLUDED.lease_ms,
           expires_at    = EXCLUDED.expires_at,
           lock_delay_ms = EXCLUDED.lock_delay_ms
    RETURNING 'GRANTED'::text, l.fencing_token, l.lease_ms, l.expires_at,
              v_found, 0::bigint, NULL::bigint;
    IF v_seq IS NOT NULL THEN
        DELETE FROM lock_waiters w WHERE w.lock_key = p_key AND w.session_id = p_session;
    END IF;
END
$$;

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
    v_ended := FOUND;
    SELECT w.session_id, w.lease_ms INTO v_head
      FROM lock_waiters w JOIN lock_sessions s ON s.session_id = w.session_id
     WHERE w.lock_key = OLD.lock_key AND w.expires_at > v_at AND s.expires_at > v_at
     ORDER BY w.seq
     LIMIT 1;
    IF NOT FOUND THEN
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
    SELECT w.lease_ms, w.lock_delay_ms, w.touched_at, w.expires_at INTO v_place
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
    IF v_place.lease_ms IS NULL OR v_place.expires_at <= v_at
       OR (v_fence.delay_until > v_at
           AND v_fence.delay_exempt IS DISTINCT FROM v_head.session_id) THEN
        PERFORM pg_notify('lock_free', v_head.session_id::text || ' ' || OLD.lock_key);
        RETURN NULL;
    END IF;

    UPDATE lock_fences f
       SET last_token = f.last_token + 1, delay_until = NULL, delay_exempt = NULL
     WHERE f.lock_key = OLD.lock_key
    RETURNING f.last_token INTO v_token;
    v_expires := v_at + v_place.lease_ms * interval '1 millisecond';
    INSERT INTO locks AS l (lock_key, fencing_token, session_id, lease_ms, expires_at, lock_delay_ms)
    VALUES (OLD.lock_key, v_token, v_head.session_id, v_place.lease_ms, v_expires,
            v_place.lock_delay_ms)
    ON CONFLICT (lock_key) DO UPDATE
       SET fencing_token = EXCLUDED.fencing_token,
           session_id    = EXCLUDED.session_id,
           lease_ms      = EXCLUDED.lease_ms,
           expires_at    = EXCLUDED.expires_at,
           lock_delay_ms = EXCLUDED.lock_delay_ms;
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
