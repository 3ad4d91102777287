CREATE OR REPLACE FUNCTION knowledge_set_acl(doc_ids uuid[], new_acl text[])
RETURNS TABLE (id uuid)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    -- the access list of each document and of its passages, where searches read it;
    -- no vector changes (the documents' update moves their collections' generations)
    UPDATE siam_vectors SET acl = new_acl WHERE document_id = ANY (doc_ids);
    RETURN QUERY
    UPDATE knowledge_documents SET acl = new_acl WHERE id = ANY (doc_ids) RETURNING id;
END
$$;
