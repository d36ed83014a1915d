-- Offers in proportion to work: the credential an offer went to and the credential that
-- claimed each payout, so that one credential holds at most a few offers beyond the payouts
-- it is working on (store::PayStore::offer) and cannot keep new payouts from the others.
ALTER TABLE payouts ADD COLUMN IF NOT EXISTS offered_by text;
ALTER TABLE payouts ADD COLUMN IF NOT EXISTS claimed_by text;
CREATE INDEX IF NOT EXISTS payouts_offered_by ON payouts (offered_by, offered_until)
    WHERE offered_by IS NOT NULL;
CREATE INDEX IF NOT EXISTS payouts_claimed_by ON payouts (claimed_by)
    WHERE claimed_by IS NOT NULL AND state IN ('PENDING', 'CLAIMED', 'SUBMITTED');
