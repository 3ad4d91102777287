-- The production schema: documents, their chunk vectors (siam_vectors) and wiki pages.
-- {{dimension}} is the dimension of the configured embedder (384 local, 768 Gemini).
CREATE EXTENSION IF NOT EXISTS vector;

-- Every document of every source; its passages are rows of siam_vectors.
CREATE TABLE knowledge_documents (
    id uuid PRIMARY KEY,
    collection text NOT NULL DEFAULT 'default',
    source_type text NOT NULL,
    source_id text NOT NULL,
    title text NOT NULL DEFAULT '',
    content text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}',
    organization text,
    division text,
    app_under_test text,
    content_hash text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (collection, source_type, source_id)
);

-- One row per embedded passage. Tenancy, source and metadata are copied from the
-- document so every filter is answered by this table alone, next to the vector.
CREATE TABLE siam_vectors (
    id uuid PRIMARY KEY,
    document_id uuid NOT NULL REFERENCES knowledge_documents (id) ON DELETE CASCADE,
    collection text NOT NULL DEFAULT 'default',
    organization text,
    division text,
    app_under_test text,
    source_type text NOT NULL,
    source_id text NOT NULL,
    title text NOT NULL DEFAULT '',
    section text NOT NULL DEFAULT '',
    chunk_index integer NOT NULL DEFAULT 0,
    chunk_count integer NOT NULL DEFAULT 1,
    content text NOT NULL,
    content_hash text NOT NULL,
    embedding vector({{dimension}}) NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}',
    fts tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', title || ' ' || section), 'A')
        || to_tsvector('english', content)
    ) STORED,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- Vectors and words stay in the row (not out of line in TOAST): an exact scan reads the
-- vectors and full-text ranking reads the words without a TOAST lookup per passage.
ALTER TABLE siam_vectors ALTER COLUMN embedding SET STORAGE PLAIN;
ALTER TABLE siam_vectors ALTER COLUMN fts SET STORAGE MAIN;
CREATE INDEX siam_vectors_embedding ON siam_vectors
    USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64);
-- GIN without a pending list: a search never scans entries not yet merged into the index.
CREATE INDEX siam_vectors_fts ON siam_vectors USING gin (fts) WITH (fastupdate = off);
CREATE INDEX siam_vectors_metadata ON siam_vectors
    USING gin (metadata jsonb_path_ops) WITH (fastupdate = off);
CREATE INDEX siam_vectors_source ON siam_vectors (collection, source_type);
CREATE INDEX siam_vectors_organization ON siam_vectors (organization);
CREATE INDEX siam_vectors_division ON siam_vectors (division);
CREATE INDEX siam_vectors_app_under_test ON siam_vectors (app_under_test);
CREATE INDEX siam_vectors_document ON siam_vectors (document_id, chunk_index);
CREATE INDEX siam_vectors_content_hash ON siam_vectors (content_hash);

-- The page view of wiki documents: searchable by keyword (fts) and by meaning
-- (embedding: the normalised mean of its passages; the passages are in siam_vectors).
CREATE TABLE wiki_documents (
    id uuid PRIMARY KEY REFERENCES knowledge_documents (id) ON DELETE CASCADE,
    title text NOT NULL DEFAULT '',
    markdown_content text NOT NULL,
    url text NOT NULL,
    app_name text,
    embedding vector({{dimension}}),
    fts tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', title), 'A') || to_tsvector('english', markdown_content)
    ) STORED,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE wiki_documents ALTER COLUMN fts SET STORAGE MAIN;
CREATE INDEX wiki_documents_embedding ON wiki_documents
    USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64);
CREATE INDEX wiki_documents_fts ON wiki_documents USING gin (fts) WITH (fastupdate = off);
CREATE INDEX wiki_documents_app_name ON wiki_documents (app_name);

-- Which embedder wrote the vectors: another one is refused rather than mixed in.
CREATE TABLE knowledge_store_meta (
    key text PRIMARY KEY,
    value text NOT NULL
);

-- A counter every committed write moves: caches key their entries on it.
CREATE TABLE knowledge_store_state (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    generation bigint NOT NULL DEFAULT 0
);
INSERT INTO knowledge_store_state DEFAULT VALUES;

\ir functions/knowledge_bump_generation.sql
CREATE TRIGGER knowledge_documents_changed
    AFTER INSERT OR UPDATE OR DELETE ON knowledge_documents
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_bump_generation();
CREATE TRIGGER siam_vectors_changed
    AFTER INSERT OR UPDATE OR DELETE ON siam_vectors
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_bump_generation();

-- Supabase exposes public tables through PostgREST: only the service role (which
-- bypasses row level security) and the table owner may read or write them.
ALTER TABLE knowledge_documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE siam_vectors ENABLE ROW LEVEL SECURITY;
ALTER TABLE wiki_documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE knowledge_store_meta ENABLE ROW LEVEL SECURITY;
ALTER TABLE knowledge_store_state ENABLE ROW LEVEL SECURITY;
