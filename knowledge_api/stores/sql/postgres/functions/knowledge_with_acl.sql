CREATE OR REPLACE FUNCTION knowledge_with_acl(filter_where jsonb, filter_acl text[])
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN filter_acl IS NULL THEN filter_where
        WHEN filter_where IS NULL THEN jsonb_build_object('op', '$acl', 'values', to_jsonb(filter_acl))
        ELSE jsonb_build_object('op', '$and', 'parts', jsonb_build_array(
            jsonb_build_object('op', '$acl', 'values', to_jsonb(filter_acl)), filter_where))
    END
$$;
