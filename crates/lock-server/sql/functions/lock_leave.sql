-- A waiter leaves the key's queue (it gave up, or its request went away). The key's grant row
-- (and its shares' rows) is taken FOR KEY SHARE first: a release (revoke, reap) of it in flight now would find this
-- place locked by this transaction, skip it and wake it instead of the next waiter, while this
-- delete's wake-up still saw the grant and named nobody; the next waiter would sleep until its
-- recheck. Waiting for that release here, this delete's wake-up sees the key free; a release
-- that comes after waits for this transaction and then finds the place gone.
CREATE OR REPLACE FUNCTION lock_leave(p_key text, p_session uuid)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM locks l WHERE l.lock_key = p_key FOR KEY SHARE;
    PERFORM 1 FROM lock_holds h WHERE h.lock_key = p_key FOR KEY SHARE;
    DELETE FROM lock_waiters w WHERE w.lock_key = p_key AND w.session_id = p_session;
END
$$;
