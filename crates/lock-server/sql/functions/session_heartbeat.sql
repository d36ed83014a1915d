-- L2 heartbeat. Outcomes: OK, SESSION_UNKNOWN, SESSION_EXPIRED (an expired session is
-- never revived).
CREATE OR REPLACE FUNCTION session_heartbeat(p_session uuid)
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
