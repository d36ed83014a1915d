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
