-- The credential that opened each session (L1): L2-L6 on a session answer only that
-- credential, and its session quota counts its live sessions here, on every replica. Sessions opened before this column existed have none and answer nobody: their
-- clients are told SESSION_UNKNOWN and open a new session.
ALTER TABLE lock_sessions ADD COLUMN IF NOT EXISTS credential TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS lock_sessions_credential ON lock_sessions (credential, expires_at);
