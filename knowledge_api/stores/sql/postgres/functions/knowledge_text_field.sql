CREATE OR REPLACE FUNCTION knowledge_text_field(metadata jsonb, field text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(metadata -> field) = 'string' THEN metadata ->> field END
$$;
