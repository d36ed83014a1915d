-- The grant that set each payout's fence (its proof's grant id, base64url), beside the token:
-- a token issued twice (a lock store restored from a backup) is two grants, and only the one
-- that claimed may write. Empty for a fence set before grants were named.
ALTER TABLE payouts ADD COLUMN fence_grant TEXT NOT NULL DEFAULT '';
