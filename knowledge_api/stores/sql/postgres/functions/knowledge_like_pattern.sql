CREATE OR REPLACE FUNCTION knowledge_like_pattern(query_text text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT '%' || replace(replace(replace(btrim(query_text), '\', '\\'), '%', '\%'), '_', '\_') || '%'
$$;
