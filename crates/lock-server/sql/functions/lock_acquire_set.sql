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
