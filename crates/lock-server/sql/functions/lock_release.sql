-- L6 release: compare-and-delete of p_session's grant of p_key with p_token, the whole key's
-- or a share's (ADR 0007). A voluntary end: no lock-delay; the delete's trigger wakes or
-- hands over to the next waiter. Answers whether a grant went (a stale token or another
-- session's finds nothing; never an error).
CREATE OR REPLACE FUNCTION lock_release(p_key text, p_session uuid, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM locks l
     WHERE l.lock_key = p_key AND l.fencing_token = p_token AND l.session_id = p_session;
    IF FOUND THEN RETURN true; END IF;
    -- A share: after the key's fence row, as every write to a key's shares (grantors hold it
    -- until they commit), so a waiter's call orders itself against this delete.
    PERFORM 1 FROM lock_fences f WHERE f.lock_key = p_key FOR SHARE;
    DELETE FROM lock_holds h
     WHERE h.lock_key = p_key AND h.fencing_token = p_token AND h.session_id = p_session;
    RETURN FOUND;
END
$$;
