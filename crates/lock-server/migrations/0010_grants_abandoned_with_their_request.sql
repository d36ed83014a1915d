-- Generated from crates/lock-server/sql/functions/ by tests/it/sql_functions.rs: edit
-- those files, not this one. Restates: lock_abandon, lock_acquire, lock_batch, lock_leave,
-- lock_notify_free, lock_regrant.

-- Written by hand: each grant and queue place names the acquire request it was made for, so
-- that a request which ends without telling its client can give back what the store made for
-- it (lock_abandon). 0 names no request. lock_acquire, lock_regrant and lock_batch take the
-- request as a new last argument, so their old signatures go. Replicas older than this
-- migration call those and fail until replaced.
ALTER TABLE locks ADD COLUMN IF NOT EXISTS request_id bigint NOT NULL DEFAULT 0;
ALTER TABLE lock_waiters ADD COLUMN IF NOT EXISTS request_id bigint NOT NULL DEFAULT 0;
DROP FUNCTION IF EXISTS lock_acquire(text, uuid, bigint, bigint, bigint);
DROP FUNCTION IF EXISTS lock_regrant(text, bigint, bigint);
DROP FUNCTION IF EXISTS lock_batch(text[], text[], uuid[], bigint[], bigint[], bigint[], bigint[]);

-- An acquire request ended without telling its client of a grant (its HTTP request was
-- cancelled, the store's answer was lost or withheld): the grant made for it (by its own call
-- or handed over to its place) is released, unless a later request of the session was granted
-- the key since (lock_regrant wrote that request's id). The delete's trigger hands the key on
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
        DELETE FROM lock_waiters w
         WHERE w.lock_key = p_key AND w.session_id = p_session AND w.request_id = p_request;
    END IF;
    DELETE FROM locks l
     WHERE l.lock_key = p_key AND l.session_id = p_session AND l.request_id = p_request;
    RETURN FOUND;
END
$$;

-- L4 acquire in one round trip. Outcomes: GRANTED (new token, or the same token when the
-- session already holds the key), LOCK_HELD (wait_ms: until the holder's grant ends),
-- LOCK_DELAYED (wait_ms: until the delay ends), QUEUED (ahead: waiters first), and
-- SESSION_UNKNOWN, SESSION_EXPIRED. With p_queue_ms > 0 a refused caller keeps a place in
-- the key's queue; a grant removes it. Grantors of one key serialise on its lock_fences row,
-- so tokens strictly increase. p_request names the request asking: its grant, its queue
-- place and a grant handed over to that place record it (lock_abandon). The uncontended path runs five statements: session, grant row
-- (and whether anyone queues), fence, grant row again under the fence lock, insert.
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
                                       touched_at, request_id)
        VALUES (p_key, p_session, now() + p_queue_ms * interval '1 millisecond', p_lease_ms,
                p_lock_delay_ms, now(), p_request)
        ON CONFLICT (lock_key, session_id) DO UPDATE
           SET expires_at    = GREATEST(w.expires_at, EXCLUDED.expires_at),
               lease_ms      = EXCLUDED.lease_ms,
               lock_delay_ms = EXCLUDED.lock_delay_ms,
               touched_at    = EXCLUDED.touched_at,
               request_id    = EXCLUDED.request_id;
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

-- Group commit: the writes a replica gathered while its previous batch was in flight, in one
-- statement and one transaction, so N heartbeats, acquires, renews and releases cost one WAL
-- flush instead of N. Each write is decided by the same function that decides it alone
-- (lock_acquire, lock_renew, session_heartbeat, the release's compare-and-delete), and sees
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
    -- Every batch takes its row locks in one order (heartbeats by session, then keys), so two
    -- replicas' batches never wait for each other in a cycle. One key's writes keep their
    -- arrival order: FIFO between the callers of a batch.
    FOR i IN SELECT u.n FROM generate_subscripts(p_kinds, 1) AS u(n)
              ORDER BY p_keys[u.n],
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
            DELETE FROM locks l
             WHERE l.lock_key = p_keys[i] AND l.fencing_token = p_tokens[i]
               AND l.session_id = p_sessions[i];
            v_released := FOUND;
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
-- is taken FOR KEY SHARE first: a release (revoke, reap) of it in flight now would find this
-- place locked by this transaction, skip it and wake it instead of the next waiter, while this
-- delete's wake-up still saw the grant and named nobody; the next waiter would sleep until its
-- recheck. Waiting for that release here, this delete's wake-up sees the key free; a release
-- that comes after waits for this transaction and then finds the place gone.
CREATE OR REPLACE FUNCTION lock_leave(p_key text, p_session uuid)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM locks l WHERE l.lock_key = p_key FOR KEY SHARE;
    DELETE FROM lock_waiters w WHERE w.lock_key = p_key AND w.session_id = p_session;
END
$$;

-- Wake-ups and hand-over across replicas: when a key's grant row or a queue place goes
-- (release, revoke, the reaper, a closed session, a head leaving) and the key is free with a
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

-- A live grant re-granted to its own session, for request p_request: lease and expiry never
-- shrink, and the grant is that request's from now on (lock_abandon).
CREATE OR REPLACE FUNCTION lock_regrant(p_key text, p_token bigint, p_lease_ms bigint,
                                        p_request bigint)
RETURNS TABLE (outcome text, fencing_token bigint, lease_ms bigint, expires_at timestamptz,
               took_over boolean)
LANGUAGE sql AS $$
    UPDATE locks l
       SET lease_ms = GREATEST(l.lease_ms, p_lease_ms),
           expires_at = GREATEST(l.expires_at,
                                 now() + GREATEST(l.lease_ms, p_lease_ms) * interval '1 millisecond'),
           request_id = p_request
     WHERE l.lock_key = p_key AND l.fencing_token = p_token
 RETURNING 'GRANTED'::text, l.fencing_token, l.lease_ms, l.expires_at, false;
$$;
