-- Who revoked each key's last revoked grant, and why (L8). Written by the revoke itself, in
-- the statement that deletes the grant, so the holder's next renew (answered LOCK_REVOKED)
-- never sees a revoke without its note. One row per key, replaced by the next revoke, like
-- the key's row in lock_fences.
CREATE TABLE IF NOT EXISTS lock_revocations (
    lock_key      TEXT        PRIMARY KEY,
    fencing_token BIGINT      NOT NULL CHECK (fencing_token > 0),
    revoked_by    TEXT        NOT NULL,
    reason        TEXT,
    revoked_at    TIMESTAMPTZ NOT NULL
);
