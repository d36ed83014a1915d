-- The live waiter first in `p_key`'s queue, if any.
CREATE OR REPLACE FUNCTION lock_queue_head(p_key text) RETURNS uuid
LANGUAGE sql STABLE AS $$
    SELECT w.session_id
      FROM lock_waiters w JOIN lock_sessions s ON s.session_id = w.session_id
     WHERE w.lock_key = p_key AND w.expires_at > now() AND s.expires_at > now()
     ORDER BY w.seq
     LIMIT 1;
$$;
