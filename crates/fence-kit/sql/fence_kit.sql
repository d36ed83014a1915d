-- fence-kit's PostgreSQL fence: one table of fences and one function that a writer calls
-- inside its own transaction, before its write. A refused write raises, so the writer's
-- transaction aborts and nothing it wrote is kept. Safe to apply again (idempotent).
--
-- The rule is fence-kit's `check_fence` (tested against it on one table of cases):
--   * a claim (p_claim = true) passes with a token above the fence, or the grant that set the
--     fence again; it raises the fence to the presented token and grant;
--   * a later write (p_claim = false) passes only from the grant that set the fence;
--   * a reader's action (p_shared = true, a read/write lock's shared grant) passes with a
--     token above the fence (the last writer's claim) and never moves it; it takes the fence
--     row FOR SHARE, so readers run side by side and a writer's claim waits for them;
--   * an empty fence grant (a fence set before grants were named) matches any grant of its
--     token.
-- The fence row is taken FOR UPDATE, so concurrent writers of one resource queue on it
-- until the first one's transaction ends; call fence_check before touching the resource's
-- own rows, and check the resource's own end state after it (a stale writer then learns it
-- was fenced, not that the resource ended).
--
-- Refusals: SQLSTATE 'FENCE' (fenced out; the message names the token and the fence) and
-- SQLSTATE '22023' (a token below 1, an empty or over-long resource name, no grant: every
-- write names the grant of its proof, so a claim can never store an empty one).

CREATE TABLE IF NOT EXISTS fence_kit_fences (
    resource   text        PRIMARY KEY CHECK (length(resource) BETWEEN 1 AND 1024),
    token      bigint      NOT NULL CHECK (token >= 0),
    grant_id   text        NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The grant has no default: CREATE OR REPLACE cannot drop one, so the function goes first.
DROP FUNCTION IF EXISTS fence_check(text, bigint, text, boolean);
DROP FUNCTION IF EXISTS fence_check(text, bigint, text, boolean, boolean);
CREATE FUNCTION fence_check(
    p_resource text,
    p_token    bigint,
    p_grant    text,
    p_claim    boolean DEFAULT false,
    p_shared   boolean DEFAULT false
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    fence fence_kit_fences%ROWTYPE;
    held  boolean;
BEGIN
    IF p_token IS NULL OR p_token < 1 THEN
        RAISE EXCEPTION 'fence_check: token must be at least 1, got %', p_token
            USING ERRCODE = '22023';
    END IF;
    IF p_resource IS NULL OR length(p_resource) NOT BETWEEN 1 AND 1024 THEN
        RAISE EXCEPTION 'fence_check: resource must be 1 to 1024 characters'
            USING ERRCODE = '22023';
    END IF;
    IF p_grant IS NULL OR p_grant = '' THEN
        RAISE EXCEPTION 'fence_check: a grant id is required (the grant of the write''s proof)'
            USING ERRCODE = '22023';
    END IF;
    IF p_claim AND p_shared THEN
        RAISE EXCEPTION 'fence_check: a claim is a writer''s, never shared'
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO fence_kit_fences (resource, token) VALUES (p_resource, 0)
        ON CONFLICT (resource) DO NOTHING;
    IF p_shared THEN
        SELECT * INTO fence FROM fence_kit_fences WHERE resource = p_resource FOR SHARE;
        IF p_token > fence.token THEN
            RETURN fence.token;
        END IF;
        RAISE EXCEPTION 'fenced out: reader token % of % predates the writer fence %',
            p_token, p_resource, fence.token
            USING ERRCODE = 'FENCE';
    END IF;
    SELECT * INTO fence FROM fence_kit_fences WHERE resource = p_resource FOR UPDATE;
    held := p_token = fence.token AND (fence.grant_id = '' OR p_grant = fence.grant_id);
    IF p_claim AND (p_token > fence.token OR held) THEN
        UPDATE fence_kit_fences
           SET token = p_token, grant_id = p_grant, updated_at = now()
         WHERE resource = p_resource;
        RETURN p_token;
    END IF;
    IF held THEN
        RETURN fence.token;
    END IF;
    RAISE EXCEPTION 'fenced out: token % may not write %, a newer grant holds fence %',
        p_token, p_resource, fence.token
        USING ERRCODE = 'FENCE';
END
$$;
