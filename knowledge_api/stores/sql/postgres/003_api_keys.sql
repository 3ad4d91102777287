-- API keys: a name, the SHA-256 of the token (never the token), scopes and the
-- collections the key may reach (NULL: every collection). Every replica reads them here.
CREATE TABLE knowledge_api_keys (
    name text PRIMARY KEY,
    key_hash text NOT NULL UNIQUE,
    scopes text[] NOT NULL,
    collections text[],
    created_at timestamptz NOT NULL DEFAULT now()
);

\ir functions/knowledge_api_key_create.sql

\ir functions/knowledge_api_key_revoke.sql

NOTIFY pgrst, 'reload schema';
