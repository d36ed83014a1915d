-- L4 acquire in one round trip. Outcomes: GRANTED (new token, or the same token when the
-- session already holds the key), LOCK_HELD (wait_ms: until the holder's grant ends),
-- LOCK_DELAYED (wait_ms: until the delay ends), QUEUED (ahead: waiters first), and
-- SESSION_UNKNOWN, SESSION_EXPIRED, and KIND_CONFLICT (lock_shares_answer: the key holds
-- permits, or this session reads it). With p_queue_ms > 0 a refused caller keeps a place in
-- the key's queue; a grant removes it. Grantors of one key serialise on its lock_fences row,
-- so tokens strictly increase. p_request names the request asking: its grant, its queue
-- place and a grant handed over to that place record it (lock_abandon). The uncontended path
-- runs six statements: session, grant row (and whether anyone queues or shares the key),
-- fence, grant row and shares again under the fence lock, insert.
-- lock_store::decide::decide is the same decision in Rust (the conformance suite holds both
-- to one table).
CREATE OR REPLACE FUNCTION lock_acquire(p_key text, p_session uuid, p_lease_ms bigint,
                             p_queue_ms bigint, p_lock_delay_ms bigint, p_request bigint)
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
    v_shared boolean;
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
        -- A share's release takes the fence row first (FOR SHARE): while the key has shares
        -- (ADR 0007), the fence row orders this place against their releases the same way.
        IF EXISTS (SELECT 1 FROM lock_holds h WHERE h.lock_key = p_key) THEN
            PERFORM 1 FROM lock_fences f WHERE f.lock_key = p_key FOR NO KEY UPDATE;
        END IF;
        -- The place names the grant its waiter asks for (a hand-over grants exactly that)
        -- and when this call touched it (a hand-over's grant begins after it).
        INSERT INTO lock_waiters AS w (lock_key, session_id, expires_at, lease_ms, lock_delay_ms,
                                       touched_at, request_id)
        VALUES (p_key, p_session, now() + p_queue_ms * interval '1 millisecond', p_lease_ms,
                p_lock_delay_ms, now(), p_request)
        ON CONFLICT (lock_key, session_id) DO UPDATE
           SET expires_at    = GREATEST(w.expires_at, EXCLUDED.expires_at),
               lease_ms      = EXCLUDED.lease_ms,
               lock_delay_ms = EXCLUDED.lock_delay_ms,
               touched_at    = EXCLUDED.touched_at,
               request_id    = EXCLUDED.request_id,
               claim         = 'exclusive';
    END IF;

    -- First look, without a write: somebody else holds it, or this session does; and
    -- whether anybody queues for the key at all (in the same statement: the uncontended
    -- path pays no separate queue query).
    SELECT l.fencing_token, l.session_id, LEAST(l.expires_at, s.expires_at) AS ends_at,
           COALESCE(l.expires_at > now() AND s.expires_at > now(), false) AS live,
           EXISTS (SELECT 1 FROM lock_waiters q WHERE q.lock_key = p_key) AS queued,
           EXISTS (SELECT 1 FROM lock_holds h WHERE h.lock_key = p_key) AS shared
      INTO v_cur
      FROM (SELECT 1) AS one
      LEFT JOIN locks l ON l.lock_key = p_key
      LEFT JOIN lock_sessions s ON s.session_id = l.session_id;
    IF v_cur.live AND v_cur.session_id <> p_session THEN
        RETURN QUERY SELECT 'LOCK_HELD'::text, v_cur.fencing_token, NULL::bigint, v_cur.ends_at, false,
               ceil(extract(epoch FROM v_cur.ends_at - now()) * 1000)::bigint, NULL::bigint;
        RETURN;
    END IF;
    -- Readers or permits hold the key (ADR 0007): another kind, or a writer waits for them.
    v_shared := v_cur.shared;
    IF v_shared THEN
        RETURN QUERY SELECT * FROM lock_shares_answer(p_key, p_session);
        IF FOUND THEN RETURN; END IF;
    END IF;
    -- Same session again: the same grant (idempotent retry of L4). Lease and expiry only
    -- grow, so every answer satisfies expires_at >= now() + lease_ms (I4).
    IF v_cur.live THEN
        IF v_cur.queued THEN
            DELETE FROM lock_waiters w WHERE w.lock_key = p_key AND w.session_id = p_session;
        END IF;
        RETURN QUERY SELECT r.*, 0::bigint, NULL::bigint
                       FROM lock_regrant(p_key, v_cur.fencing_token, p_lease_ms, p_request) r;
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
                           FROM lock_regrant(p_key, v_cur.fencing_token, p_lease_ms, p_request) r;
        ELSE
            RETURN QUERY SELECT 'LOCK_HELD'::text, v_cur.fencing_token, NULL::bigint, v_cur.ends_at, false,
                   ceil(extract(epoch FROM v_cur.ends_at - now()) * 1000)::bigint, NULL::bigint;
        END IF;
        RETURN;
    END IF;

    -- A share granted since the first look (share grantors take the fence row first). A key
    -- with no share row at all skips the call: most keys never have one.
    IF EXISTS (SELECT 1 FROM lock_holds h WHERE h.lock_key = p_key) THEN
        RETURN QUERY SELECT * FROM lock_shares_answer(p_key, p_session);
        IF FOUND THEN RETURN; END IF;
    END IF;

    -- Lock-delay: of the dead grant still in the table (from its end), and of one already
    -- removed (on the fence row). Refused after drawing a token: that number is skipped.
    v_delay_until := NULL;
    IF v_found AND v_cur.session_id <> p_session AND v_cur.lock_delay_ms > 0 THEN
        v_delay_until := v_cur.ends_at + v_cur.lock_delay_ms * interval '1 millisecond';
    END IF;
    -- Ended shares of other sessions not yet reaped (ADR 0007), from their ends.
    IF v_shared THEN
        SELECT GREATEST(v_delay_until,
                        max(LEAST(h.expires_at, s.expires_at) + h.lock_delay_ms * interval '1 millisecond'))
          INTO v_delay_until
          FROM lock_holds h LEFT JOIN lock_sessions s ON s.session_id = h.session_id
         WHERE h.lock_key = p_key AND h.session_id <> p_session AND h.lock_delay_ms > 0;
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
    INSERT INTO locks AS l (lock_key, fencing_token, session_id, lease_ms, expires_at, lock_delay_ms,
                            request_id)
    VALUES (p_key, v_fence.last_token, p_session, p_lease_ms,
            now() + p_lease_ms * interval '1 millisecond', p_lock_delay_ms, p_request)
    ON CONFLICT (lock_key) DO UPDATE
       SET fencing_token = EXCLUDED.fencing_token,
           session_id    = EXCLUDED.session_id,
           lease_ms      = EXCLUDED.lease_ms,
           expires_at    = EXCLUDED.expires_at,
           lock_delay_ms = EXCLUDED.lock_delay_ms,
           request_id    = EXCLUDED.request_id
    RETURNING 'GRANTED'::text, l.fencing_token, l.lease_ms, l.expires_at,
              v_found, 0::bigint, NULL::bigint;
    IF v_seq IS NOT NULL THEN
        DELETE FROM lock_waiters w WHERE w.lock_key = p_key AND w.session_id = p_session;
    END IF;
END
$$;

-- The three-argument form (a try-acquire without lock-delay), for pgbench's script and for
-- anyone driving the SQL directly.
CREATE OR REPLACE FUNCTION lock_acquire(p_key text, p_session uuid, p_lease_ms bigint)
RETURNS TABLE (outcome text, fencing_token bigint, lease_ms bigint, expires_at timestamptz,
               took_over boolean, wait_ms bigint, ahead bigint)
LANGUAGE sql AS $$
    SELECT * FROM lock_acquire(p_key, p_session, p_lease_ms, 0, 0, 0);
$$;
