-- Upload jobs (POST /v1/knowledge/files): the job's status and the service that holds
-- its files as columns, the rest (files, progress, errors) as one JSON document. Every
-- replica can answer for a job; the one holding its files resumes it after a restart.
CREATE TABLE knowledge_upload_jobs (
    id text PRIMARY KEY,
    status text NOT NULL,
    owner text NOT NULL,
    data jsonb NOT NULL,
    created_at text NOT NULL
);

CREATE INDEX knowledge_upload_jobs_unfinished ON knowledge_upload_jobs (owner, created_at)
    WHERE status IN ('queued', 'running');

\ir functions/knowledge_upload_job_save.sql

NOTIFY pgrst, 'reload schema';
