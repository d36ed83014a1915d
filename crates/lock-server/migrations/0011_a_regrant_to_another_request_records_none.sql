-- Generated from crates/lock-server/sql/functions/ by tests/it/sql_functions.rs: edit
-- those files, not this one. Restates: lock_abandon, lock_regrant.

-- An acquire request ended without telling its client of a grant (its HTTP request was
-- cancelled, the store's answer was lost or withheld): the grant made for it (by its own call
-- or handed over to its place) is released, unless another request of the session was granted
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
        DELETE FROM lock_waiters w
         WHERE w.lock_key = p_key AND w.session_id = p_session AND w.request_id = p_request;
    END IF;
    DELETE FROM locks l
     WHERE l.lock_key = p_key AND l.session_id = p_session AND l.request_id = p_request;
    RETURN FOUND;
END
$$;

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
