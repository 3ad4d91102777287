-- API keys: a name, the SHA-256 of the token (never the token), scopes and the
-- collections the key may reach (NULL: every collection). Every replica reads them here.
CREATE TABLE knowledge_api_keys (
    name text PRIMARY KEY,
    key_hash text NOT NULL UNIQUE,
    scopes text[] NOT NULL,
    collections text[],
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Replaced in 022_document_acl: the current text is functions/knowledge_api_key_create.sql.
CREATE OR REPLACE FUNCTION knowledge_api_key_create(
    key_name text, key_hash text, key_scopes text[], key_collections text[]
)
RETURNS TABLE (created boolean)
LANGUAGE sql AS $$
    INSERT INTO knowledge_api_keys (name, key_hash, scopes, collections)
    VALUES (key_name, key_hash, key_scopes, key_collections)
    ON CONFLICT (name) DO NOTHING
    RETURNING true
$$;

\ir functions/knowledge_api_key_revoke.sql

NOTIFY pgrst, 'reload schema';
