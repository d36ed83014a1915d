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
