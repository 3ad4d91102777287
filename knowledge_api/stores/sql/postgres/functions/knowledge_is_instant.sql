CREATE OR REPLACE FUNCTION knowledge_is_instant(value text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN value ~ '^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])([T ]([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d{1,6})?)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)?)?$'
             AND left(value, 4) <> '0000'
        THEN substr(value, 9, 2)::integer <= extract(day FROM make_date(
                 left(value, 4)::integer, substr(value, 6, 2)::integer, 1)
                 + interval '1 month' - interval '1 day')
        ELSE false
    END
$$;
