CREATE OR REPLACE FUNCTION knowledge_any_terms(query_text text) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT replace(plainto_tsquery('english', query_text)::text, ' & ', ' | ')::tsquery
$$;
