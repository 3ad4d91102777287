CREATE OR REPLACE FUNCTION knowledge_index_documents(documents jsonb)
RETURNS TABLE (documents integer, passages integer)
LANGUAGE sql AS $$
    SELECT knowledge_stage_json(documents);
    SELECT * FROM knowledge_index_staged();
$$;
