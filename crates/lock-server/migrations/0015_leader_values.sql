-- What an election's leader announces (C2 §2.4c): one row per key, the value of the grant
-- whose token it names. A read answers it only while that token holds the key, so a new
-- grant never shows its predecessor's value; a write never lowers the token, so a stale
-- leader's late proclaim never hides its successor's. Rows, like lock_fences, are kept.
CREATE TABLE lock_values (
    lock_key      text   PRIMARY KEY,
    fencing_token bigint NOT NULL CHECK (fencing_token > 0),
    value         text   NOT NULL
);
