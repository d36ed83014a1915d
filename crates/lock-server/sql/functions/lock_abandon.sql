-- An acquire request ended without telling its client of a grant (its HTTP request was
-- cancelled, the store's answer was lost or withheld): the grant made for it (by its own call
-- or handed over to its place; or a share, ADR 0007) is released, unless another request of the session was granted
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
        PERFORM 1 FROM lock_holds h WHERE h.lock_key = p_key FOR KEY SHARE;
        DELETE FROM lock_waiters w
         WHERE w.lock_key = p_key AND w.session_id = p_session AND w.request_id = p_request;
    END IF;
    DELETE FROM locks l
     WHERE l.lock_key = p_key AND l.session_id = p_session AND l.request_id = p_request;
    IF FOUND THEN RETURN true; END IF;
    PERFORM 1 FROM lock_fences f WHERE f.lock_key = p_key FOR SHARE;
    DELETE FROM lock_holds h
     WHERE h.lock_key = p_key AND h.session_id = p_session AND h.request_id = p_request;
    RETURN FOUND;
END
$$;
