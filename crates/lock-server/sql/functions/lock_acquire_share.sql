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
