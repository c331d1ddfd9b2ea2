-- Join tokens (docs/architecture.md §11): what a new node presents once to join a pool. Pool-scoped, single
-- use, expiring, revocable; stored only as a SHA-256 hash: the secret is answered once, by
-- joinTokens.create, and is in no table, event or admission result afterwards.
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.join_tokens (
    token_id     uuid CONSTRAINT join_tokens_pkey PRIMARY KEY,
    pool_id      uuid NOT NULL CONSTRAINT join_tokens_pool_id_fkey REFERENCES compute.pools,
    token_sha256 bytea NOT NULL CONSTRAINT join_tokens_token_sha256_key UNIQUE CONSTRAINT join_tokens_token_sha256_check CHECK (length(token_sha256) = 32),
    state        text NOT NULL CONSTRAINT join_tokens_state_check CHECK (state IN ('active', 'used', 'revoked')),
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL CONSTRAINT join_tokens_expire_after_creation CHECK (expires_at > created_at),
    used_at      timestamptz,
    used_by_node uuid,
    revoked_at   timestamptz,
    CONSTRAINT join_tokens_used_has_used_at CHECK ((state = 'used') = (used_at IS NOT NULL)),
    CONSTRAINT join_tokens_revoked_has_revoked_at CHECK ((state = 'revoked') = (revoked_at IS NOT NULL))
);
CREATE INDEX join_tokens_pool ON compute.join_tokens (pool_id, created_at);
COMMENT ON TABLE compute.join_tokens IS 'Single-use, expiring, revocable tokens to join a pool; only their SHA-256 is kept.';

CREATE FUNCTION compute.join_token_json(p_token compute.join_tokens)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.jsonb_build_object('token_id', p_token.token_id, 'pool_id', p_token.pool_id,
        'state', CASE WHEN p_token.state = 'active' AND p_token.expires_at <= compute.compute_now() THEN 'expired' ELSE p_token.state END,
        'created_at', p_token.created_at, 'expires_at', p_token.expires_at, 'used_at', p_token.used_at,
        'used_by_node', p_token.used_by_node, 'revoked_at', p_token.revoked_at);
$$;
COMMENT ON FUNCTION compute.join_token_json(compute.join_tokens) IS 'A join token as the API lists it (never its secret).';

CREATE FUNCTION compute.api_join_tokens_create(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := compute.compute_now();
    v_ttl    integer := coalesce(compute.input_integer(p_input, 'ttl_seconds', false), compute.limit('join_token_ttl_seconds'));
    -- 244 random bits from two v4 uuids (gen_random_uuid draws from the server's strong random source).
    v_secret text := 'bcjt_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text, '-', '');
    v_token  compute.join_tokens;
BEGIN
    IF v_ttl < 60 OR v_ttl > compute.limit('join_token_ttl_seconds_max') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('ttl_seconds %s is out of range', v_ttl),
            pg_catalog.format('Use 60 to %s seconds (limit join_token_ttl_seconds_max).', compute.limit('join_token_ttl_seconds_max')));
    END IF;
    INSERT INTO compute.join_tokens (token_id, pool_id, token_sha256, state, created_at, expires_at)
    VALUES (p_resource_id::uuid, compute.input_uuid(p_input, 'pool_id'), pg_catalog.sha256(pg_catalog.convert_to(v_secret, 'UTF8')),
            'active', v_now, v_now + v_ttl * interval '1 second')
    RETURNING * INTO v_token;
    RETURN compute.join_token_json(v_token) || pg_catalog.jsonb_build_object('token', v_secret);
END
$$;
COMMENT ON FUNCTION compute.api_join_tokens_create(uuid, text, jsonb) IS 'joinTokens.create: answers the secret once.';

CREATE FUNCTION compute.api_join_tokens_list(p_tenant_id uuid, p_input jsonb)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(pg_catalog.jsonb_agg(compute.join_token_json(j) ORDER BY j.created_at), '[]')
      FROM (SELECT j.* FROM compute.join_tokens AS j JOIN compute.tenant_pools(p_tenant_id) AS p ON p.pool_id = j.pool_id
             WHERE j.pool_id = coalesce(compute.input_uuid(p_input, 'pool_id', false), j.pool_id)
             ORDER BY j.created_at DESC LIMIT compute.list_limit(p_input)) AS j;
$$;
COMMENT ON FUNCTION compute.api_join_tokens_list(uuid, jsonb) IS 'joinTokens.list (without secrets)';

CREATE FUNCTION compute.api_join_tokens_revoke(p_tenant_id uuid, p_resource_id text, p_input jsonb)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    v_token compute.join_tokens;
BEGIN
    UPDATE compute.join_tokens SET state = 'revoked', revoked_at = compute.compute_now()
     WHERE token_id = p_resource_id::uuid AND state = 'active'
    RETURNING * INTO v_token;
    IF NOT FOUND THEN  -- revoking a used or revoked token changes nothing; answer it as it is
        SELECT * INTO v_token FROM compute.join_tokens AS j WHERE j.token_id = p_resource_id::uuid;
    END IF;
    RETURN compute.join_token_json(v_token);
END
$$;
COMMENT ON FUNCTION compute.api_join_tokens_revoke(uuid, text, jsonb) IS 'joinTokens.revoke (idempotent)';
