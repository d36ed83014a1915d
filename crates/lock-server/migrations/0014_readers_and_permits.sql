-- Generated from crates/lock-server/sql/functions/ by tests/it/sql_functions.rs: edit
-- those files, not this one. Restates: lock_abandon, lock_acquire, lock_acquire_set,
-- lock_acquire_share, lock_batch, lock_leave, lock_notify_free, lock_release, lock_renew,
-- lock_shares_answer.

-- Readers and permits (ADR 0007): a key's shares, beside its one exclusive grant row in
-- locks. A reader's slot and count are NULL; a permit has its slot, below the key's count.
-- Every share draws its token from the key's lock_fences row, as a lock does, so tokens rise
-- per key whatever kind granted them. Written by hand, above the generated text.
CREATE TABLE lock_holds (
    lock_key      text        NOT NULL,
    fencing_token bigint      NOT NULL CHECK (fencing_token > 0),
    session_id    uuid        NOT NULL REFERENCES lock_sessions (session_id) ON DELETE CASCADE,
    slot          integer     CHECK (slot >= 0),
    permits       integer     CHECK (permits >= 1),
    lease_ms      bigint      NOT NULL CHECK (lease_ms > 0),
    expires_at    timestamptz NOT NULL,
    lock_delay_ms bigint      NOT NULL DEFAULT 0 CHECK (lock_delay_ms >= 0),
    request_id    bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (lock_key, fencing_token),
    CHECK ((slot IS NULL) = (permits IS NULL) AND (slot IS NULL OR slot < permits))
);
CREATE INDEX lock_holds_session_id ON lock_holds (session_id);
CREATE INDEX lock_holds_expires_at ON lock_holds (expires_at);
-- What a queue place asks for: the key alone, a reader's share, or a permit.
ALTER TABLE lock_waiters ADD COLUMN claim text NOT NULL DEFAULT 'exclusive'
    CHECK (claim IN ('exclusive', 'shared', 'permit'));

-- An acquire request ended without telling its client of a grant (its HTTP request was
-- cancelled, the store's answer was lost or withheld): the grant made for it (by its own call
-- or handed over to its place; or a share, ADR 0007) is released, unless another request of the session was granted
-- the key since (lock_regrant then recorded no request). The delete's trigger hands the key on
-- to the next waiter. With p_leave the request's own queue place goes first. A voluntary end:
-- no lock-delay. Request 0 names nobody and abandons nothing. Answers whether a grant went.
CREATE OR REPLACE FUNCTION lock_abandon(p_key text, p_session uuid, p_request bigint,
                                        p_leave boolean)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF p_request = 0 THEN
        RETURN false;
    END IF;
    IF p_leave THEN
        -- As lock_leave: a release in flight is waited for, so one of the two wakes the next.
        PERFORM 1 FROM locks l WHERE l.lock_key = p_key FOR KEY SHARE;
        PERFORM 1 FROM lock_holds h WHERE h.lock_key = p_key FOR KEY SHARE;
        DELETE FROM lock_waiters w
         WHERE w.lock_key = p_key AND w.session_id = p_session AND w.request_id = p_request;
    END IF;
    DELETE FROM locks l
     WHERE l.lock_key = p_key AND l.session_id = p_session AND l.request_id = p_request;
    IF FOUND THEN RETURN true; END IF;
    PERFORM 1 FROM lock_fences f WHERE f.lock_key = p_key FOR SHARE;
    DELETE FROM lock_holds h
     WHERE h.lock_key = p_key AND h.session_id = p_session AND h.request_id = p_request;
    RETURN FOUND;
END
$$;

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

    -- A share granted since the first look (share grantors take the fence row first).
    RETURN QUERY SELECT * FROM lock_shares_answer(p_key, p_session);
    IF FOUND THEN RETURN; END IF;

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

-- Acquire a key set (ADR 0007): every key of p_keys (sorted bytewise, each once, 1 to 16
-- keys, as lock_store::key_set::canonical leaves them) granted to p_session by lock_acquire's
-- own rule, or none. Granted: one row per key, in p_keys' order (ord from 1). Refused: one
-- row, the first key refused (ord) with lock_acquire's refusal; the grants made before it are
-- undone (a subtransaction), so no key is ever held alone. SESSION_UNKNOWN and
-- SESSION_EXPIRED come as one row with ord 1. With p_queue_ms > 0 the set keeps a place in
-- every key's queue. lock_store::key_set::decide_set is the same decision in Rust.
--
-- Locks, key by key in the set's order (bytewise, as lock_batch and the reaper take keys):
-- the key's grant row FOR KEY SHARE (as lock_acquire with a place: a delete in flight
-- commits first, or waits for this transaction and then wakes its places), then its fence
-- row FOR UPDATE (created at token 0 if the key was never granted), then its place. Sets that
-- share a key serialise on that key's fence row, so the places of two sets that share keys
-- are in one order on every key they share: neither waits behind the other on one key and
-- before it on another. A set's place asks for no lease (lease_ms NULL): a freed key wakes its
-- waiter to ask for the whole set and is never handed to it alone.
CREATE OR REPLACE FUNCTION lock_acquire_set(p_keys text[], p_session uuid, p_lease_ms bigint,
                                            p_queue_ms bigint, p_lock_delay_ms bigint,
                                            p_request bigint)
RETURNS TABLE (ord integer, outcome text, fencing_token bigint, lease_ms bigint,
               expires_at timestamptz, took_over boolean, wait_ms bigint, ahead bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_session_expires timestamptz;
    v_key text;
    v_row record;
    v_refused record;
    v_refused_ord integer;
    v_tokens bigint[] := '{}';
    v_leases bigint[] := '{}';
    v_expires timestamptz[] := '{}';
    v_took boolean[] := '{}';
BEGIN
    SELECT s.expires_at INTO v_session_expires
      FROM lock_sessions s WHERE s.session_id = p_session;
    IF NOT FOUND OR v_session_expires <= now() THEN
        RETURN QUERY SELECT 1, CASE WHEN v_session_expires IS NULL THEN 'SESSION_UNKNOWN'
                                    ELSE 'SESSION_EXPIRED' END,
               NULL::bigint, NULL::bigint, NULL::timestamptz, false, NULL::bigint, NULL::bigint;
        RETURN;
    END IF;

    FOREACH v_key IN ARRAY p_keys LOOP
        PERFORM 1 FROM locks l WHERE l.lock_key = v_key FOR KEY SHARE;
        INSERT INTO lock_fences (lock_key, last_token) VALUES (v_key, 0)
        ON CONFLICT (lock_key) DO NOTHING;
        PERFORM 1 FROM lock_fences f WHERE f.lock_key = v_key FOR UPDATE;
        IF p_queue_ms > 0 THEN
            INSERT INTO lock_waiters AS w (lock_key, session_id, expires_at, lease_ms,
                                           lock_delay_ms, touched_at, request_id)
            VALUES (v_key, p_session, now() + p_queue_ms * interval '1 millisecond', NULL,
                    p_lock_delay_ms, now(), p_request)
            ON CONFLICT (lock_key, session_id) DO UPDATE
               SET expires_at    = GREATEST(w.expires_at, EXCLUDED.expires_at),
                   lease_ms      = NULL,
                   lock_delay_ms = EXCLUDED.lock_delay_ms,
                   touched_at    = EXCLUDED.touched_at,
                   request_id    = EXCLUDED.request_id,
                   claim         = 'exclusive';
        END IF;
    END LOOP;

    BEGIN
        FOREACH v_key IN ARRAY p_keys LOOP
            SELECT * INTO v_row
              FROM lock_acquire(v_key, p_session, p_lease_ms, 0, p_lock_delay_ms, p_request);
            IF v_row.outcome = 'QUEUED' AND v_row.ahead = 1 AND p_queue_ms > 0 THEN
                -- As lock_acquire: the one place ahead may be leaving now, and its delete
                -- cannot see this set's place (not committed), so it wakes nobody. Locked FOR
                -- KEY SHARE: a delete committed first hid it (ask again), one still running
                -- waits for this transaction and then wakes this set's place.
                PERFORM 1
                   FROM lock_waiters w JOIN lock_sessions s ON s.session_id = w.session_id
                  WHERE w.lock_key = v_key AND w.session_id <> p_session
                    AND w.seq < (SELECT m.seq FROM lock_waiters m
                                  WHERE m.lock_key = v_key AND m.session_id = p_session)
                    AND w.expires_at > now() AND s.expires_at > now()
                    FOR KEY SHARE OF w;
                IF NOT FOUND THEN
                    SELECT * INTO v_row
                      FROM lock_acquire(v_key, p_session, p_lease_ms, 0, p_lock_delay_ms,
                                        p_request);
                END IF;
            END IF;
            IF v_row.outcome <> 'GRANTED' THEN
                v_refused := v_row;
                v_refused_ord := cardinality(v_tokens) + 1;
                RAISE EXCEPTION USING ERRCODE = 'LKSET', MESSAGE = 'a set member was refused';
            END IF;
            v_tokens := v_tokens || v_row.fencing_token;
            v_leases := v_leases || v_row.lease_ms;
            v_expires := v_expires || v_row.expires_at;
            v_took := v_took || v_row.took_over;
        END LOOP;
    EXCEPTION WHEN SQLSTATE 'LKSET' THEN
        RETURN QUERY SELECT v_refused_ord, v_refused.outcome, v_refused.fencing_token,
               v_refused.lease_ms, v_refused.expires_at, v_refused.took_over,
               v_refused.wait_ms, v_refused.ahead;
        RETURN;
    END;
    RETURN QUERY
    SELECT g.n::integer, 'GRANTED'::text, g.t, g.l, g.e, g.o, 0::bigint, NULL::bigint
      FROM unnest(v_tokens, v_leases, v_expires, v_took) WITH ORDINALITY AS g(t, l, e, o, n);
END
$$;

-- L4 acquire of a share of a key (ADR 0007): a reader's (p_permits NULL) or one of p_permits
-- permits. Outcomes as lock_acquire's (GRANTED, LOCK_HELD, LOCK_DELAYED, QUEUED,
-- SESSION_UNKNOWN, SESSION_EXPIRED), plus KIND_CONFLICT: the key's live grants are of another
-- kind, or this session writes the key; held_as names them ('exclusive', 'shared',
-- 'permits:N'). A grant answers its scope ('shared', 'permit-{slot}').
--
-- Every grantor of a key serialises on its lock_fences row, this one first of all (created at
-- token 0 for a key never granted), so what it reads of the key's grant row, its shares and
-- its queue stays true until it commits. The rule is lock_store::claim::conflict, then
-- lock_store::shared::decide_shared or lock_store::permits::decide_permit, in their order:
-- the caller's own share, a holder that keeps it out, the queue (a reader waits only for a
-- writer queued before it), a lock-delay, and only then the key's next token (a permit in the
-- lowest free slot). The conformance suite holds both copies to one table. A share's queue
-- place asks for no lease: a freed key wakes its waiter to ask, never hands it a share.
CREATE OR REPLACE FUNCTION lock_acquire_share(p_key text, p_session uuid, p_lease_ms bigint,
                                              p_queue_ms bigint, p_lock_delay_ms bigint,
                                              p_request bigint, p_permits integer)
RETURNS TABLE (outcome text, fencing_token bigint, lease_ms bigint, expires_at timestamptz,
               wait_ms bigint, ahead bigint, scope text, held_as text)
LANGUAGE plpgsql AS $$
DECLARE
    v_claim text := CASE WHEN p_permits IS NULL THEN 'shared' ELSE 'permit' END;
    v_session_expires timestamptz;
    v_fence record;
    v_writer record;
    v_shares record;
    v_mine record;
    v_seq bigint;
    v_ahead bigint;
    v_writers bigint;
    v_delay_until timestamptz;
    v_slot integer;
    v_token bigint;
BEGIN
    SELECT s.expires_at INTO v_session_expires
      FROM lock_sessions s WHERE s.session_id = p_session;
    IF NOT FOUND OR v_session_expires <= now() THEN
        RETURN QUERY SELECT CASE WHEN FOUND THEN 'SESSION_EXPIRED' ELSE 'SESSION_UNKNOWN' END,
               NULL::bigint, NULL::bigint, NULL::timestamptz, NULL::bigint, NULL::bigint,
               NULL::text, NULL::text;
        RETURN;
    END IF;

    IF p_queue_ms > 0 THEN
        -- As lock_acquire, before the fence row: a release of the key's grant row in flight
        -- either commits first (and the reads below see it) or waits for this transaction
        -- (and its wake-up sees this caller's place). A share's release, renew and abandon
        -- take the fence row first (FOR SHARE), so the fence row below orders them.
        PERFORM 1 FROM locks l WHERE l.lock_key = p_key FOR KEY SHARE;
    END IF;
    INSERT INTO lock_fences AS f (lock_key, last_token) VALUES (p_key, 0)
    ON CONFLICT (lock_key) DO UPDATE SET last_token = f.last_token
    RETURNING f.last_token, f.delay_until, f.delay_exempt INTO v_fence;

    -- What holds the key: its grant row, and its live shares.
    SELECT l.fencing_token, l.session_id, l.lock_delay_ms,
           LEAST(l.expires_at, s.expires_at) AS ends_at,
           COALESCE(l.expires_at > now() AND s.expires_at > now(), false) AS live
      INTO v_writer
      FROM locks l LEFT JOIN lock_sessions s ON s.session_id = l.session_id
     WHERE l.lock_key = p_key;
    -- One statement, one snapshot: a share released meanwhile is in all of it or none.
    SELECT count(*) AS live, min(h.permits) AS permits, bool_or(h.slot IS NULL) AS readers,
           min(h.ends_at) AS first_ends,
           (array_agg(h.fencing_token ORDER BY h.ends_at))[1] AS first_token
      INTO v_shares
      FROM (SELECT h.fencing_token, h.permits, h.slot,
                   LEAST(h.expires_at, s.expires_at) AS ends_at
              FROM lock_holds h JOIN lock_sessions s ON s.session_id = h.session_id
             WHERE h.lock_key = p_key AND h.expires_at > now() AND s.expires_at > now()) AS h;

    -- One key, one kind (lock_store::claim::conflict); a writer asking to read.
    IF (v_claim = 'shared' AND v_shares.permits IS NOT NULL)
       OR (v_claim = 'permit' AND (v_writer.live OR v_shares.readers
                                   OR v_shares.permits <> p_permits)) THEN
        RETURN QUERY SELECT 'KIND_CONFLICT'::text, NULL::bigint, NULL::bigint, NULL::timestamptz,
               NULL::bigint, NULL::bigint, NULL::text,
               CASE WHEN v_writer.live THEN 'exclusive'
                    WHEN v_shares.readers THEN 'shared'
                    ELSE 'permits:' || v_shares.permits END;
        RETURN;
    END IF;
    IF v_writer.live AND v_writer.session_id = p_session THEN
        RETURN QUERY SELECT 'KIND_CONFLICT'::text, NULL::bigint, NULL::bigint, NULL::timestamptz,
               NULL::bigint, NULL::bigint, NULL::text, 'exclusive'::text;
        RETURN;
    END IF;

    IF p_queue_ms > 0 THEN
        INSERT INTO lock_waiters AS w (lock_key, session_id, expires_at, lease_ms, lock_delay_ms,
                                       touched_at, request_id, claim)
        VALUES (p_key, p_session, now() + p_queue_ms * interval '1 millisecond', NULL,
                p_lock_delay_ms, now(), p_request, v_claim)
        ON CONFLICT (lock_key, session_id) DO UPDATE
           SET expires_at    = GREATEST(w.expires_at, EXCLUDED.expires_at),
               lease_ms      = NULL,
               lock_delay_ms = EXCLUDED.lock_delay_ms,
               touched_at    = EXCLUDED.touched_at,
               request_id    = EXCLUDED.request_id,
               claim         = EXCLUDED.claim;
    END IF;

    -- The caller's own live share: the same grant again, its lease and expiry only growing.
    -- Live at this instant, after the fence row (the wait for it may have outlasted the
    -- share, and a grant made meanwhile must not find it revived beside it).
    UPDATE lock_holds h
       SET lease_ms = GREATEST(h.lease_ms, p_lease_ms),
           expires_at = GREATEST(h.expires_at,
                                 now() + GREATEST(h.lease_ms, p_lease_ms) * interval '1 millisecond'),
           request_id = CASE WHEN h.request_id = p_request THEN p_request ELSE 0 END
     WHERE h.lock_key = p_key AND h.session_id = p_session
       AND h.expires_at > clock_timestamp()
    RETURNING h.fencing_token, h.lease_ms, h.expires_at, h.slot INTO v_mine;
    IF FOUND THEN
        DELETE FROM lock_waiters w WHERE w.lock_key = p_key AND w.session_id = p_session;
        RETURN QUERY SELECT 'GRANTED'::text, v_mine.fencing_token, v_mine.lease_ms,
               v_mine.expires_at, 0::bigint, NULL::bigint,
               CASE WHEN v_mine.slot IS NULL THEN 'shared' ELSE 'permit-' || v_mine.slot END,
               NULL::text;
        RETURN;
    END IF;

    -- A holder that keeps it out: for a reader, the writer; for a permit, every slot taken
    -- (the holder that ends soonest is named).
    IF v_claim = 'shared' AND v_writer.live THEN
        RETURN QUERY SELECT 'LOCK_HELD'::text, v_writer.fencing_token, NULL::bigint,
               v_writer.ends_at, ceil(extract(epoch FROM v_writer.ends_at - now()) * 1000)::bigint,
               NULL::bigint, NULL::text, NULL::text;
        RETURN;
    END IF;
    IF v_claim = 'permit' AND v_shares.live >= p_permits THEN
        RETURN QUERY SELECT 'LOCK_HELD'::text, v_shares.first_token, NULL::bigint,
               v_shares.first_ends,
               ceil(extract(epoch FROM v_shares.first_ends - now()) * 1000)::bigint,
               NULL::bigint, NULL::text, NULL::text;
        RETURN;
    END IF;

    -- FIFO: live places of other sessions before the caller's (all, if it has none); a
    -- reader waits only when a writer is among them.
    SELECT m.seq INTO v_seq FROM lock_waiters m
     WHERE m.lock_key = p_key AND m.session_id = p_session;
    SELECT count(*), count(*) FILTER (WHERE w.claim <> 'shared') INTO v_ahead, v_writers
      FROM lock_waiters w JOIN lock_sessions s ON s.session_id = w.session_id
     WHERE w.lock_key = p_key AND w.session_id <> p_session
       AND w.seq < COALESCE(v_seq, 9223372036854775807)
       AND w.expires_at > now() AND s.expires_at > now();
    IF v_claim = 'shared' AND v_writers = 0 THEN
        v_ahead := 0;
    END IF;
    IF v_ahead = 1 AND p_queue_ms > 0 THEN
        -- As lock_acquire: the one place ahead may be leaving now, and its delete's wake-up
        -- cannot see this place; lock it FOR KEY SHARE (gone: this caller is the head).
        PERFORM 1
           FROM lock_waiters w JOIN lock_sessions s ON s.session_id = w.session_id
          WHERE w.lock_key = p_key AND w.session_id <> p_session
            AND w.seq < COALESCE(v_seq, 9223372036854775807)
            AND w.expires_at > now() AND s.expires_at > now()
            AND (v_claim = 'permit' OR w.claim <> 'shared')
            FOR KEY SHARE OF w;
        IF NOT FOUND THEN
            v_ahead := 0;
        END IF;
    END IF;
    IF v_ahead > 0 THEN
        RETURN QUERY SELECT 'QUEUED'::text, NULL::bigint, NULL::bigint, NULL::timestamptz,
               NULL::bigint, v_ahead, NULL::text, NULL::text;
        RETURN;
    END IF;

    -- Lock-delay: of an ended grant row or ended shares of other sessions (from their end),
    -- and of one already removed (on the fence row).
    SELECT max(d.until) INTO v_delay_until FROM (
        SELECT v_writer.ends_at + v_writer.lock_delay_ms * interval '1 millisecond' AS until
         WHERE NOT v_writer.live AND v_writer.session_id <> p_session AND v_writer.lock_delay_ms > 0
        UNION ALL
        SELECT LEAST(h.expires_at, s.expires_at) + h.lock_delay_ms * interval '1 millisecond'
          FROM lock_holds h LEFT JOIN lock_sessions s ON s.session_id = h.session_id
         WHERE h.lock_key = p_key AND h.session_id <> p_session AND h.lock_delay_ms > 0
           AND NOT COALESCE(h.expires_at > now() AND s.expires_at > now(), false)
        UNION ALL
        SELECT v_fence.delay_until WHERE v_fence.delay_exempt IS DISTINCT FROM p_session) AS d;
    IF v_delay_until > now() THEN
        RETURN QUERY SELECT 'LOCK_DELAYED'::text, NULL::bigint, NULL::bigint, NULL::timestamptz,
               ceil(extract(epoch FROM v_delay_until - now()) * 1000)::bigint, NULL::bigint,
               NULL::text, NULL::text;
        RETURN;
    END IF;

    IF v_claim = 'permit' THEN
        SELECT min(n) INTO v_slot FROM generate_series(0, p_permits - 1) AS n
         WHERE NOT EXISTS (SELECT 1 FROM lock_holds h JOIN lock_sessions s ON s.session_id = h.session_id
                            WHERE h.lock_key = p_key AND h.slot = n
                              AND h.expires_at > now() AND s.expires_at > now());
    END IF;
    UPDATE lock_fences f SET last_token = f.last_token + 1, delay_until = NULL, delay_exempt = NULL
     WHERE f.lock_key = p_key
    RETURNING f.last_token INTO v_token;
    -- The share first, then the caller's place: its delete's trigger then sees the key
    -- shared, and wakes only a waiter for a share. Ended shares stay for the reaper (it
    -- reports them).
    INSERT INTO lock_holds (lock_key, fencing_token, session_id, slot, permits, lease_ms,
                            expires_at, lock_delay_ms, request_id)
    VALUES (p_key, v_token, p_session, v_slot, p_permits, p_lease_ms,
            now() + p_lease_ms * interval '1 millisecond', p_lock_delay_ms, p_request);
    IF v_seq IS NOT NULL THEN
        DELETE FROM lock_waiters w WHERE w.lock_key = p_key AND w.session_id = p_session;
    END IF;
    RETURN QUERY SELECT 'GRANTED'::text, v_token, p_lease_ms,
           now() + p_lease_ms * interval '1 millisecond', 0::bigint, NULL::bigint,
           CASE WHEN v_slot IS NULL THEN 'shared' ELSE 'permit-' || v_slot END, NULL::text;
END
$$;

-- Group commit: the writes a replica gathered while its previous batch was in flight, in one
-- statement and one transaction, so N heartbeats, acquires, renews and releases cost one WAL
-- flush instead of N. Each write is decided by the same function that decides it alone
-- (lock_acquire, lock_renew, session_heartbeat, lock_release), and sees
-- the writes before it in the batch as it would see them committed: its answer is one it
-- could have been given alone. One row per write, `ord` its position in the arrays (1-based).
--
-- Kinds: 'heartbeat' (session), 'acquire' (key, session, lease, queue, lock-delay, request),
-- 'renew' and 'release' (key, session, token). Unused slots hold '' or 0. Outcomes as the
-- single functions answer them, with RELEASED / NOT_HELD for a release; a heartbeat's TTL
-- comes back in lease_ms.
CREATE OR REPLACE FUNCTION lock_batch(p_kinds text[], p_keys text[], p_sessions uuid[],
                                      p_tokens bigint[], p_lease_ms bigint[],
                                      p_queue_ms bigint[], p_lock_delay_ms bigint[],
                                      p_requests bigint[])
RETURNS TABLE (ord integer, outcome text, fencing_token bigint, lease_ms bigint,
               expires_at timestamptz, took_over boolean, wait_ms bigint, ahead bigint)
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    v_released boolean;
BEGIN
    -- Every batch takes its row locks in one order (heartbeats by session, then keys
    -- bytewise, the order a key set and the reaper take them in), so two replicas' batches
    -- and a set never wait for each other in a cycle. One key's writes keep their arrival
    -- order: FIFO between the callers of a batch.
    FOR i IN SELECT u.n FROM generate_subscripts(p_kinds, 1) AS u(n)
              ORDER BY p_keys[u.n] COLLATE "C",
                       CASE WHEN p_kinds[u.n] = 'heartbeat' THEN p_sessions[u.n] END,
                       u.n LOOP
        CASE p_kinds[i]
        WHEN 'acquire' THEN
            RETURN QUERY
            SELECT i, a.outcome, a.fencing_token, a.lease_ms, a.expires_at, a.took_over,
                   a.wait_ms, a.ahead
              FROM lock_acquire(p_keys[i], p_sessions[i], p_lease_ms[i], p_queue_ms[i],
                                p_lock_delay_ms[i], p_requests[i]) a;
        WHEN 'renew' THEN
            RETURN QUERY
            SELECT i, r.outcome, NULL::bigint, r.lease_ms, r.expires_at, NULL::boolean,
                   NULL::bigint, NULL::bigint
              FROM lock_renew(p_keys[i], p_sessions[i], p_tokens[i]) r;
        WHEN 'release' THEN
            v_released := lock_release(p_keys[i], p_sessions[i], p_tokens[i]);
            RETURN QUERY
            SELECT i, CASE WHEN v_released THEN 'RELEASED' ELSE 'NOT_HELD' END, NULL::bigint,
                   NULL::bigint, NULL::timestamptz, NULL::boolean, NULL::bigint, NULL::bigint;
        WHEN 'heartbeat' THEN
            RETURN QUERY
            SELECT i, h.outcome, NULL::bigint, h.ttl_ms, h.expires_at, NULL::boolean,
                   NULL::bigint, NULL::bigint
              FROM session_heartbeat(p_sessions[i]) h;
        ELSE
            RAISE EXCEPTION 'lock_batch: unknown kind %', p_kinds[i];
        END CASE;
    END LOOP;
END
$$;

-- A waiter leaves the key's queue (it gave up, or its request went away). The key's grant row
-- (and its shares' rows) is taken FOR KEY SHARE first: a release (revoke, reap) of it in flight now would find this
-- place locked by this transaction, skip it and wake it instead of the next waiter, while this
-- delete's wake-up still saw the grant and named nobody; the next waiter would sleep until its
-- recheck. Waiting for that release here, this delete's wake-up sees the key free; a release
-- that comes after waits for this transaction and then finds the place gone.
CREATE OR REPLACE FUNCTION lock_leave(p_key text, p_session uuid)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM locks l WHERE l.lock_key = p_key FOR KEY SHARE;
    PERFORM 1 FROM lock_holds h WHERE h.lock_key = p_key FOR KEY SHARE;
    DELETE FROM lock_waiters w WHERE w.lock_key = p_key AND w.session_id = p_session;
END
$$;

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

-- L6 release: compare-and-delete of p_session's grant of p_key with p_token, the whole key's
-- or a share's (ADR 0007). A voluntary end: no lock-delay; the delete's trigger wakes or
-- hands over to the next waiter. Answers whether a grant went (a stale token or another
-- session's finds nothing; never an error).
CREATE OR REPLACE FUNCTION lock_release(p_key text, p_session uuid, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM locks l
     WHERE l.lock_key = p_key AND l.fencing_token = p_token AND l.session_id = p_session;
    IF FOUND THEN RETURN true; END IF;
    -- A share: after the key's fence row, as every write to a key's shares (grantors hold it
    -- until they commit), so a waiter's call orders itself against this delete.
    PERFORM 1 FROM lock_fences f WHERE f.lock_key = p_key FOR SHARE;
    DELETE FROM lock_holds h
     WHERE h.lock_key = p_key AND h.fencing_token = p_token AND h.session_id = p_session;
    RETURN FOUND;
END
$$;

-- L5 renew: extends a live grant by its own lease; never changes the token.
-- Outcomes: RENEWED (a share's: 'RENEWED shared', 'RENEWED permit-{slot}'), LOCK_LOST,
-- SESSION_UNKNOWN, SESSION_EXPIRED.
CREATE OR REPLACE FUNCTION lock_renew(p_key text, p_session uuid, p_token bigint)
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
    IF FOUND THEN RETURN; END IF;
    -- A share (ADR 0007): the outcome names its scope, which the replica signs again. A
    -- share is a row of its own that no later grant replaces, so it is renewed only while it
    -- is live at this instant, read after the key's fence row (FOR SHARE waits for a grantor
    -- in flight): a renew that began before the share ended never revives it beside the
    -- grant that followed.
    PERFORM 1 FROM lock_fences f WHERE f.lock_key = p_key FOR SHARE;
    RETURN QUERY UPDATE lock_holds h
                    SET expires_at = now() + h.lease_ms * interval '1 millisecond'
                  WHERE h.lock_key = p_key AND h.session_id = p_session
                    AND h.fencing_token = p_token AND h.expires_at > clock_timestamp()
              RETURNING 'RENEWED ' || CASE WHEN h.slot IS NULL THEN 'shared'
                                           ELSE 'permit-' || h.slot END,
                        h.lease_ms, h.expires_at;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'LOCK_LOST'::text, NULL::bigint, NULL::timestamptz;
    END IF;
END
$$;

-- What a key's live shares (ADR 0007) answer lock_acquire, an acquire of the whole key by
-- p_session: no row while none is live; KIND_CONFLICT when they are permits (ahead carries
-- their count) or p_session reads the key (ahead NULL), and the caller's queue place goes
-- (waiting cannot help); else LOCK_HELD, naming the reader that ends last (readers keep a
-- writer out until the last of them ends). lock_store::claim::conflict and the readers'
-- part of lock_store::shared::decide_shared are the same rule in Rust.
CREATE OR REPLACE FUNCTION lock_shares_answer(p_key text, p_session uuid)
RETURNS TABLE (outcome text, fencing_token bigint, lease_ms bigint, expires_at timestamptz,
               took_over boolean, wait_ms bigint, ahead bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v record;
BEGIN
    SELECT h.fencing_token, h.permits, LEAST(h.expires_at, s.expires_at) AS ends_at,
           bool_or(h.session_id = p_session) OVER () AS mine
      INTO v
      FROM lock_holds h JOIN lock_sessions s ON s.session_id = h.session_id
     WHERE h.lock_key = p_key AND h.expires_at > now() AND s.expires_at > now()
     ORDER BY LEAST(h.expires_at, s.expires_at) DESC
     LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v.permits IS NOT NULL OR v.mine THEN
        DELETE FROM lock_waiters w WHERE w.lock_key = p_key AND w.session_id = p_session;
        RETURN QUERY SELECT 'KIND_CONFLICT'::text, NULL::bigint, NULL::bigint,
               NULL::timestamptz, false, NULL::bigint, v.permits::bigint;
        RETURN;
    END IF;
    RETURN QUERY SELECT 'LOCK_HELD'::text, v.fencing_token, NULL::bigint, v.ends_at, false,
           ceil(extract(epoch FROM v.ends_at - now()) * 1000)::bigint, NULL::bigint;
END
$$;
