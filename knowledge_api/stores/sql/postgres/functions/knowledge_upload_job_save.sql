CREATE OR REPLACE FUNCTION knowledge_upload_job_save(
    job_id text, job_status text, job_owner text, job_data jsonb, job_created text
)
RETURNS TABLE (saved boolean)
LANGUAGE sql AS $$
    INSERT INTO knowledge_upload_jobs (id, status, owner, data, created_at)
    VALUES (job_id, job_status, job_owner, job_data, job_created)
    ON CONFLICT (id) DO UPDATE
        SET status = excluded.status, owner = excluded.owner, data = excluded.data
    RETURNING true
$$;
