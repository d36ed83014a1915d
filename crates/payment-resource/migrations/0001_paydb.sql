-- paydb: payouts with their fence, the one rail submission per payout, the ledger.

CREATE TABLE payouts (
    payout_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text        NOT NULL UNIQUE,
    amount_minor    bigint      NOT NULL CHECK (amount_minor > 0),
    currency        text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    beneficiary     text        NOT NULL,
    state           text        NOT NULL DEFAULT 'PENDING'
                    CHECK (state IN ('PENDING', 'CLAIMED', 'SUBMITTED', 'SETTLED', 'REJECTED', 'RAIL_AMBIGUOUS')),
    -- The highest fencing token accepted for this payout (invariant I2: it only rises).
    fence           bigint      NOT NULL DEFAULT 0 CHECK (fence >= 0),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX payouts_claimable ON payouts (payout_id) WHERE state IN ('PENDING', 'CLAIMED', 'SUBMITTED');

-- At most one submission per payout, ever (invariant I1): the primary key makes it true.
CREATE TABLE rail_submission (
    payout_id       bigint      PRIMARY KEY REFERENCES payouts (payout_id),
    presented_token bigint      NOT NULL CHECK (presented_token > 0),
    outcome         text        NOT NULL CHECK (outcome IN ('IN_FLIGHT', 'ACKED', 'REJECTED', 'TIMEOUT')),
    rail_reference  text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Double entry: each settled payout posts one debit and one credit (invariant I6).
CREATE TABLE ledger_entries (
    entry_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payout_id    bigint      NOT NULL REFERENCES payouts (payout_id),
    account      text        NOT NULL CHECK (account IN ('payouts_payable', 'rail_settlement')),
    amount_minor bigint      NOT NULL CHECK (amount_minor <> 0),
    currency     text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (payout_id, account)
);
