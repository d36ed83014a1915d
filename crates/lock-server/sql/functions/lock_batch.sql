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
