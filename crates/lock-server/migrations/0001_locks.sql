-- Lock service schema. The store's clock (now()) is the only clock for expiry.

CREATE TABLE lock_sessions (
    session_id uuid        PRIMARY KEY,
    owner_id   text        NOT NULL,
    ttl_ms     bigint      NOT NULL CHECK (ttl_ms > 0),
    expires_at timestamptz NOT NULL
);
CREATE INDEX lock_sessions_expires_at ON lock_sessions (expires_at);

-- High-water mark of fencing tokens per key. Rows are never deleted, so a token is never
-- reused even after the key's lock row is released, reaped or revoked (invariant I3).
CREATE TABLE lock_fences (
    lock_key   text   PRIMARY KEY,
    last_token bigint NOT NULL CHECK (last_token > 0)
);

-- Live (or expired but not yet reaped) grants. A session's expiry frees its locks even
-- before the reaper deletes the rows: every read joins the session and checks both expiries.
CREATE TABLE locks (
    lock_key      text        PRIMARY KEY,
    fencing_token bigint      NOT NULL CHECK (fencing_token > 0),
    session_id    uuid        NOT NULL REFERENCES lock_sessions (session_id) ON DELETE CASCADE,
    lease_ms      bigint      NOT NULL CHECK (lease_ms > 0),
    expires_at    timestamptz NOT NULL
);
CREATE INDEX locks_session_id ON locks (session_id);
CREATE INDEX locks_expires_at ON locks (expires_at);

-- A live grant re-granted to its own session: lease and expiry never shrink.
CREATE FUNCTION lock_regrant(p_key text, p_token bigint, p_lease_ms bigint)
RETURNS TABLE (outcome text, fencing_token bigint, lease_ms bigint, expires_at timestamptz,
               took_over boolean)
LANGUAGE sql AS $$
    UPDATE locks l
       SET lease_ms = GREATEST(l.lease_ms, p_lease_ms),
           expires_at = GREATEST(l.expires_at,
                                 now() + GREATEST(l.lease_ms, p_lease_ms) * interval '1 millisecond')
     WHERE l.lock_key = p_key AND l.fencing_token = p_token
 RETURNING 'GRANTED'::text, l.fencing_token, l.lease_ms, l.expires_at, false;
$$;

-- L4 acquire in one round trip. Outcomes: GRANTED (new token, or the same token when the
-- session already holds the key), LOCK_HELD, SESSION_UNKNOWN, SESSION_EXPIRED.
-- Grantors of one key serialise on its lock_fences row, so tokens strictly increase.
CREATE FUNCTION lock_acquire(p_key text, p_session uuid, p_lease_ms bigint)
RETURNS TABLE (outcome text, fencing_token bigint, lease_ms bigint, expires_at timestamptz,
               took_over boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_session_expires timestamptz;
    v_cur record;
    v_token bigint;
BEGIN
    SELECT s.expires_at INTO v_session_expires
      FROM lock_sessions s WHERE s.session_id = p_session;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'SESSION_UNKNOWN'::text, NULL::bigint, NULL::bigint, NULL::timestamptz, false;
        RETURN;
    END IF;
    IF v_session_expires <= now() THEN
        RETURN QUERY SELECT 'SESSION_EXPIRED'::text, NULL::bigint, NULL::bigint, NULL::timestamptz, false;
        RETURN;
    END IF;

    -- Fast path without a write: somebody else holds it.
    SELECT l.fencing_token, l.session_id, l.expires_at,
           (l.expires_at > now() AND s.expires_at > now()) AS live
      INTO v_cur
      FROM locks l JOIN lock_sessions s ON s.session_id = l.session_id
     WHERE l.lock_key = p_key;
    IF FOUND AND v_cur.live AND v_cur.session_id <> p_session THEN
        RETURN QUERY SELECT 'LOCK_HELD'::text, v_cur.fencing_token, NULL::bigint, v_cur.expires_at, false;
        RETURN;
    END IF;
    -- Same session again: the same grant (idempotent retry of L4). Lease and expiry only
    -- grow, so every answer satisfies expires_at >= now() + lease_ms (invariant I4).
    IF FOUND AND v_cur.live THEN
        RETURN QUERY SELECT * FROM lock_regrant(p_key, v_cur.fencing_token, p_lease_ms);
        IF FOUND THEN RETURN; END IF;
    END IF;

    -- Take the key's fence row (serialises grantors) and draw the next token.
    INSERT INTO lock_fences AS f (lock_key, last_token) VALUES (p_key, 1)
    ON CONFLICT (lock_key) DO UPDATE SET last_token = f.last_token + 1
    RETURNING f.last_token INTO v_token;

    -- Re-check under the fence row lock: a concurrent grantor may have won meanwhile.
    SELECT l.fencing_token, l.session_id, l.expires_at,
           (l.expires_at > now() AND s.expires_at > now()) AS live
      INTO v_cur
      FROM locks l JOIN lock_sessions s ON s.session_id = l.session_id
     WHERE l.lock_key = p_key;
    IF FOUND AND v_cur.live THEN
        IF v_cur.session_id = p_session THEN
            RETURN QUERY SELECT * FROM lock_regrant(p_key, v_cur.fencing_token, p_lease_ms);
        ELSE
            RETURN QUERY SELECT 'LOCK_HELD'::text, v_cur.fencing_token, NULL::bigint, v_cur.expires_at, false;
        END IF;
        RETURN;
    END IF;

    RETURN QUERY
    INSERT INTO locks AS l (lock_key, fencing_token, session_id, lease_ms, expires_at)
    VALUES (p_key, v_token, p_session, p_lease_ms, now() + p_lease_ms * interval '1 millisecond')
    ON CONFLICT (lock_key) DO UPDATE
       SET fencing_token = EXCLUDED.fencing_token,
           session_id    = EXCLUDED.session_id,
           lease_ms      = EXCLUDED.lease_ms,
           expires_at    = EXCLUDED.expires_at
    RETURNING 'GRANTED'::text, l.fencing_token, l.lease_ms, l.expires_at, (v_cur.fencing_token IS NOT NULL);
END
$$;

-- L5 renew: extends a live grant by its own lease; never changes the token.
-- Outcomes: RENEWED, LOCK_LOST, SESSION_UNKNOWN, SESSION_EXPIRED.
CREATE FUNCTION lock_renew(p_key text, p_session uuid, p_token bigint)
RETURNS TABLE (outcome text, lease_ms bigint, expires_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_session_expires timestamptz;
BEGIN
    SELECT s.expires_at INTO v_session_expires
      FROM lock_sessions s WHERE s.session_id = p_session;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'SESSION_UNKNOWN'::text, NULL::bigint, NULL::timestamptz;
        RETURN;
    END IF;
    IF v_session_expires <= now() THEN
        RETURN QUERY SELECT 'SESSION_EXPIRED'::text, NULL::bigint, NULL::timestamptz;
        RETURN;
    END IF;
    RETURN QUERY UPDATE locks l
                    SET expires_at = now() + l.lease_ms * interval '1 millisecond'
                  WHERE l.lock_key = p_key AND l.session_id = p_session
                    AND l.fencing_token = p_token AND l.expires_at > now()
              RETURNING 'RENEWED'::text, l.lease_ms, l.expires_at;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'LOCK_LOST'::text, NULL::bigint, NULL::timestamptz;
    END IF;
END
$$;

-- L2 heartbeat. Outcomes: OK, SESSION_UNKNOWN, SESSION_EXPIRED (an expired session is
-- never revived).
CREATE FUNCTION session_heartbeat(p_session uuid)
RETURNS TABLE (outcome text, ttl_ms bigint, expires_at timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY UPDATE lock_sessions s
                    SET expires_at = now() + s.ttl_ms * interval '1 millisecond'
                  WHERE s.session_id = p_session AND s.expires_at > now()
              RETURNING 'OK'::text, s.ttl_ms, s.expires_at;
    IF FOUND THEN RETURN; END IF;
    IF EXISTS (SELECT 1 FROM lock_sessions s WHERE s.session_id = p_session) THEN
        RETURN QUERY SELECT 'SESSION_EXPIRED'::text, NULL::bigint, NULL::timestamptz;
    ELSE
        RETURN QUERY SELECT 'SESSION_UNKNOWN'::text, NULL::bigint, NULL::timestamptz;
    END IF;
END
$$;
