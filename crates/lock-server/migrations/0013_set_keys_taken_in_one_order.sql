-- Generated from crates/lock-server/sql/functions/ by tests/it/sql_functions.rs: edit
-- those files, not this one. Restates: lock_acquire_set, lock_batch.

-- A key set locks each key's fence row before its first grant, so a never-granted key gets a
-- fence row at token 0 (its first grant still draws 1). Written by hand, above the
-- generated text.
ALTER TABLE lock_fences DROP CONSTRAINT lock_fences_last_token_check;
ALTER TABLE lock_fences ADD CONSTRAINT lock_fences_last_token_check CHECK (last_token >= 0);

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
                   request_id    = EXCLUDED.request_id;
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
