"""POST /v1/knowledge/files: files sent as multipart/form-data, indexed by a job;
GET /v1/knowledge/jobs/{id}: where that job is."""

from __future__ import annotations

import shutil
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import validation
from knowledge_api.errors import InvalidRequest, NotFound
from knowledge_api.ledger import DONE, FAILED, QUEUED, RUNNING, Job
from knowledge_api.models import DEFAULT_COLLECTION, SOURCE_TYPES
from knowledge_api.principals import ACL_TEXT_PATTERN, acl_text
from knowledge_api.routes.audit import actor
from knowledge_api.usecases.uploads import MAX_FILES, Sent, Upload, UploadJobs
from knowledge_api.web.access import access, budget_of
from knowledge_api.web.fields import Body, CollectionName, Custom, Date, OneOf
from knowledge_api.web.http import JSONResponse, service
from knowledge_api.web.multipart import MAX_FIELD_BYTES, Pace, Receiving, receive
from knowledge_api.web.schema import INTEGER, STRING, array, enum, obj

FILE = "file"
TYPE = "source_type"
BINARY = {"type": "string", "format": "binary"}
MAX_SOURCE = 500


def file_types(values: dict[str, list[str]], files: int) -> tuple[str, ...]:
    """Each file's own source type when `source_type` was sent once per file (in the
    files' order); () when once or not at all: it applies to every file. Any other
    field sent more than once is refused, not taken at one of its values."""
    for name, sent in values.items():
        if len(sent) > 1 and name != TYPE:
            raise InvalidRequest(name, f"sent {len(sent)} times: send it once")
    types = values.get(TYPE, [])
    if len(types) < 2:
        return ()
    if len(types) != files:
        raise InvalidRequest(
            TYPE,
            f"sent {len(types)} times for {files} files: send it once (for every file) "
            "or once per file, in the files' order",
        )
    for index, kind in enumerate(types):
        if kind not in SOURCE_TYPES:
            raise InvalidRequest(f"{TYPE}[{index}]", f"must be one of {', '.join(SOURCE_TYPES)}")
    return tuple(types)


def source(value: Any) -> str:
    """The source's name as sent; blank is refused, not taken as a source named ""
    that no route could name again."""
    name = validation.source_name(value, "source")
    if not name.strip():
        raise InvalidRequest("source", "must not be blank (leave the field out: `upload`)")
    if len(name) > MAX_SOURCE:
        raise InvalidRequest("source", f"must be at most {MAX_SOURCE} characters")
    return name


FIELDS = (
    CollectionName("collection", "The collection to index into.", DEFAULT_COLLECTION),
    OneOf(
        "source_type",
        "Where the documents come from: sent once, for every file, or once per file, "
        "in the files' order, each file's own.",
        "wiki",
        allowed=SOURCE_TYPES,
    ),
    Custom(
        "source",
        "The source the documents belong to (not blank).",
        "upload",
        source,
        {
            "type": "string",
            "maxLength": MAX_SOURCE,
            "allOf": [
                {"pattern": validation.NOT_BLANK_PATTERN},
                {"pattern": validation.SOURCE_PATTERN},
            ],
        },
    ),
    Date(
        "created_at",
        "When the files' items were created (ISO 8601; a JSON-lines record's own wins).",
        null=False,
    ),
    Date(
        "updated_at",
        "When they last changed (ISO 8601; a JSON-lines record's own wins).",
        null=False,
    ),
    Custom(
        "acl",
        "Who may read the documents: comma-separated principals (public, user:<id>, "
        "group:<name>; empty: closed, admin keys only); remembered as the source's own. "
        "Absent: the source's own list, else public.",
        None,
        check=lambda value: None if value is None else acl_text(value, "acl"),
        shape={  # at most MAX_FIELD_BYTES: 4 bytes at most a character
            "type": "string",
            "maxLength": MAX_FIELD_BYTES // 4,
            "pattern": ACL_TEXT_PATTERN,
        },
    ),
)
FILES = Body(
    "FileUpload",
    Custom(
        FILE,
        f"One or more files (up to {MAX_FILES}), each a `file` part with its file name: "
        ".md, .txt, .html, .pdf, .docx, .pptx, .jsonl, .eml, .mbox, .msg, .csv, .xlsx, "
        ".yaml, .json, .png, .jpg or .tiff.",
        shape={**array(BINARY), "minItems": 1, "maxItems": MAX_FILES},
    ),
    *FIELDS,
    media_type="multipart/form-data",
)
FORM = Body("FileUploadFields", *FIELDS)
"""The form's fields, parsed like a JSON body's (unknown ones refused)."""

ACCEPTED = obj({"job_id": STRING, "status": enum(QUEUED), "files": INTEGER})
"""The body of `upload`'s 202."""
COUNT = obj({"done": INTEGER, "total": INTEGER})
CHUNKS = obj({"done": INTEGER, "total": INTEGER, "embedded": INTEGER})
JOB = obj(
    {
        "job_id": STRING,
        "status": enum(QUEUED, RUNNING, DONE, FAILED),
        "collection": STRING,
        "source_type": STRING,
        "source": STRING,
        "files": COUNT,
        "chunks": CHUNKS,
        "errors": array(obj({"file": STRING, "reason": STRING})),
        "created_at": STRING,
        "updated_at": STRING,
    },
    {"reason": STRING, "source_types": array(STRING)},
)
"""The body of `job`."""


def uploads(request: Request) -> UploadJobs:
    jobs: UploadJobs = request.app.state.uploads
    return jobs


def receiving(request: Request) -> Receiving:
    found: Receiving = request.app.state.receiving
    return found


async def upload(request: Request) -> Response:
    """The body is read to disk first: a form's fields may come after its files."""
    service(request).jobs.check_writable()
    jobs = uploads(request)
    settings = request.app.state.settings
    job_id = jobs.new_job_id()
    folder = jobs.folder_of(job_id)
    client = request.client.host if request.client else "-"
    pace = Pace(settings.body_timeout, settings.upload_min_rate * 1024)
    try:
        with receiving(request).slot(budget_of(access(request), client)):
            received = await receive(request, folder, settings.max_file_mb * 2**20, MAX_FILES, pace)
        types = file_types(received.values, len(received.files))
        values = validation.in_order(FORM.parse(received.fields, "form"))
        access(request).collection(values["collection"])
        if not received.files:
            raise InvalidRequest(FILE, "send at least one file, as a part named 'file'")
        sent = [Sent(f.name, f.path, f.size, f.too_large) for f in received.files]
        job = await jobs.submit(job_id, Upload(**values, source_types=types), sent)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    accepted = {"job_id": job.id, "files": [file.name for file in job.files][:1000]}
    action = "POST /v1/knowledge/files"
    await service(request).audit(actor(request), action, job.collection, accepted)
    return JSONResponse(
        {"job_id": job.id, "status": job.status, "files": len(job.files)},
        status_code=202,
        headers={"Location": f"/v1/knowledge/jobs/{job.id}"},
    )


async def job(request: Request) -> Response:
    job_id = request.path_params["id"]
    found = await service(request).jobs.get(job_id)
    if found is None or not access(request).reaches(found.collection):
        raise NotFound(f"no upload job with id {job_id!r}", id=job_id)
    return JSONResponse(job_view(found))


def job_view(job: Job) -> dict[str, Any]:
    settled = [file for file in job.files if file.state != "pending"]
    body: dict[str, Any] = {
        "job_id": job.id,
        "status": job.status,
        "collection": job.collection,
        "source_type": job.source_type,
        "source": job.source,
        "files": {"done": len(settled), "total": len(job.files)},
        "chunks": {"done": job.chunks_done, "total": job.chunks_total, "embedded": job.embedded},
        "errors": [
            {"file": file.name, "reason": file.reason}
            for file in job.files
            if file.state == "failed" or file.reason  # indexed, some of its records not
        ],
        "created_at": job.created_at,
        "updated_at": job.updated_at,
    }
    if job.reason:
        body["reason"] = job.reason
    if any(file.source_type for file in job.files):
        body["source_types"] = [file.source_type or job.source_type for file in job.files]
    return body
