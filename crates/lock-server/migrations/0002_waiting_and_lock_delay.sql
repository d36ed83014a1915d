-- Issue 13: FIFO waiting and lock-delay. The store's clock (now()) stays the only clock.

-- A grant's lock-delay: if it ends involuntarily (lease or session expiry, L8 revoke), no
-- other session is granted the key for this long after it ended.
ALTER TABLE locks ADD COLUMN lock_delay_ms bigint NOT NULL DEFAULT 0 CHECK (lock_delay_ms >= 0);

-- A delay in force on a key whose grant row is gone (revoked, reaped). It lives on the
-- never-deleted fence row, which every grantor locks anyway. `delay_exempt`: the session
-- whose grant ended (the delay protects it from others, not from itself).
ALTER TABLE lock_fences ADD COLUMN delay_until timestamptz;
ALTER TABLE lock_fences ADD COLUMN delay_exempt uuid;

-- The waiters of each key, in arrival order (`seq`). One place per session and key; a place
-- lapses at `expires_at` (the waiter's deadline plus slack) or with its session.
CREATE TABLE lock_waiters (
    lock_key   text        NOT NULL,
    session_id uuid        NOT NULL REFERENCES lock_sessions (session_id) ON DELETE CASCADE,
    seq        bigint      GENERATED ALWAYS AS IDENTITY,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (lock_key, session_id)
);
CREATE INDEX lock_waiters_order ON lock_waiters (lock_key, seq);
CREATE INDEX lock_waiters_session ON lock_waiters (session_id);

-- The live waiter first in `p_key`'s queue, if any.
CREATE FUNCTION lock_queue_head(p_key text) RETURNS uuid
LANGUAGE sql STABLE AS $$
    SELECT w.session_id
      FROM lock_waiters w JOIN lock_sessions s ON s.session_id = w.session_id
     WHERE w.lock_key = p_key AND w.expires_at > now() AND s.expires_at > now()
     ORDER BY w.seq
     LIMIT 1;
$$;

-- Wake-ups across replicas: when a key's grant row or a queue place goes, and the key is
-- free with a live head waiter, NOTIFY 'lock_free' with "<session> <key>" (delivered at
-- commit to every replica's listener, which wakes that one waiter if it is its own). No
-- waiter, no notification: the uncontended path pays one index probe.
CREATE FUNCTION lock_notify_free() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_head uuid;
BEGIN
    -- The common case first: nobody queues for this key (one index probe).
    IF NOT EXISTS (SELECT 1 FROM lock_waiters w WHERE w.lock_key = OLD.lock_key) THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM locks l JOIN lock_sessions s ON s.session_id = l.session_id
                WHERE l.lock_key = OLD.lock_key AND l.expires_at > now() AND s.expires_at > now()) THEN
        RETURN NULL;
    END IF;
    v_head := lock_queue_head(OLD.lock_key);
    IF v_head IS NOT NULL THEN
        PERFORM pg_notify('lock_free', v_head::text || ' ' || OLD.lock_key);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER locks_notify_free AFTER DELETE ON locks
    FOR EACH ROW EXECUTE FUNCTION lock_notify_free();
CREATE TRIGGER lock_waiters_notify_free AFTER DELETE ON lock_waiters
    FOR EACH ROW EXECUTE FUNCTION lock_notify_free();

DROP FUNCTION lock_acquire(text, uuid, bigint);

-- L4 acquire in one round trip. Outcomes: GRANTED (new token, or the same token when the
-- session already holds the key), LOCK_HELD (wait_ms: until the holder's grant ends),
-- LOCK_DELAYED (wait_ms: until the delay ends), QUEUED (ahead: waiters first), and
-- SESSION_UNKNOWN, SESSION_EXPIRED. With p_queue_ms > 0 a refused caller keeps a place in
-- the key's queue; a grant removes it. Grantors of one key serialise on its lock_fences row,
-- so tokens strictly increase. The uncontended path runs five statements, as before issue 13:
-- session, grant row (and whether anyone queues), fence, grant row again under the fence
-- lock, insert.
CREATE FUNCTION lock_acquire(p_key text, p_session uuid, p_lease_ms bigint,
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
        INSERT INTO lock_waiters AS w (lock_key, session_id, expires_at)
        VALUES (p_key, p_session, now() + p_queue_ms * interval '1 millisecond')
        ON CONFLICT (lock_key, session_id) DO UPDATE
           SET expires_at = GREATEST(w.expires_at, EXCLUDED.expires_at);
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

-- The three-argument form (a try-acquire without lock-delay), kept for pgbench's script
-- and for anyone driving the SQL directly.
CREATE FUNCTION lock_acquire(p_key text, p_session uuid, p_lease_ms bigint)
RETURNS TABLE (outcome text, fencing_token bigint, lease_ms bigint, expires_at timestamptz,
               took_over boolean, wait_ms bigint, ahead bigint)
LANGUAGE sql AS $$
    SELECT * FROM lock_acquire(p_key, p_session, p_lease_ms, 0, 0);
$$;
