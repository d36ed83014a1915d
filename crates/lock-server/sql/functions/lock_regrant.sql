-- A live grant re-granted to its own session, for request p_request: lease and expiry never
-- shrink. Re-granted to another request than the one it records, it becomes no single
-- request's (request 0): either may have told its client, so neither may abandon it
-- (lock_abandon; a request whose call landed late must not take back a grant another
-- request of the session was answered).
CREATE OR REPLACE FUNCTION lock_regrant(p_key text, p_token bigint, p_lease_ms bigint,
                                        p_request bigint)
RETURNS TABLE (outcome text, fencing_token bigint, lease_ms bigint, expires_at timestamptz,
               took_over boolean)
LANGUAGE sql AS $$
    UPDATE locks l
       SET lease_ms = GREATEST(l.lease_ms, p_lease_ms),
           expires_at = GREATEST(l.expires_at,
                                 now() + GREATEST(l.lease_ms, p_lease_ms) * interval '1 millisecond'),
           request_id = CASE WHEN l.request_id = p_request THEN p_request ELSE 0 END
     WHERE l.lock_key = p_key AND l.fencing_token = p_token
 RETURNING 'GRANTED'::text, l.fencing_token, l.lease_ms, l.expires_at, false;
$$;
