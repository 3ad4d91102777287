"""Uploads as jobs (POST /v1/knowledge/files): files received over HTTP wait on disk,
one folder per job, and one worker reads and indexes them in the order they came.

The job's record in the store (stores/tables/jobs.py) says where it is: queued, running, done
(some files may have failed, each with its reason) or failed (nothing could be
indexed). It is saved after each file, so a service that stops mid-job finds it at its
next start and goes on from the first file not indexed (files already indexed are not
read again, and their passages' vectors are found by content hash); a job whose files
are gone is marked failed, saying so. A job whose writes fail (a full disk, a store
gone) stops with its files and is tried again every RETRY_AFTER_S seconds until they
succeed. The folder is removed when the job ends.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath, PureWindowsPath

from knowledge_api.errors import (
    EmbeddingError,
    ExtractionError,
    KnowledgeAPIError,
    KnowledgeStoreError,
)
from knowledge_api.ledger import DONE, FAILED, QUEUED, RUNNING, Actor, Job, JobFile, changes
from knowledge_api.models import Document
from knowledge_api.service import KnowledgeService

log = logging.getLogger("knowledge_api.uploads")
NUL = "\x00"
MAX_FILES = 1000
"""Most files one upload may hold."""
RETRY_AFTER_S = 10.0
"""A job stopped because writes failed (a full disk, a store gone) is tried again this
long after, and again until they succeed."""
ABANDONED_AFTER = timedelta(hours=6)
"""A job saves its record after each file; one that has not for this long, on a service
that is not this one, has lost its service."""


@dataclass(frozen=True, slots=True)
class Upload:
    """Where an upload's documents go."""

    collection: str
    source_type: str
    source: str
    created_at: str = ""
    updated_at: str = ""
    """The documents' dates (a JSON-lines record's own win); "": the file's."""
    acl: tuple[str, ...] | None = None
    """Who may read them (None: the source's own list, else public)."""
    source_types: tuple[str, ...] = ()
    """Each file's own source type, in the order the files were sent (empty:
    `source_type` for every file)."""


@dataclass(frozen=True, slots=True)
class Sent:
    """A file as received: the name it was sent with, its bytes on disk."""

    name: str
    path: Path
    size: int
    too_large: bool = False


class UploadJobs:
    """The jobs of this service: new ones submitted, unfinished ones resumed at start,
    one worker running them one after the other."""

    def __init__(self, service: KnowledgeService) -> None:
        self.service = service
        self.jobs = service.records.job_table
        self.folder = service.settings.uploads_path
        self.max_file_mb = service.settings.max_file_mb
        self.owner = f"{socket.gethostname()}:{self.folder.resolve()}"
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.retry_after = RETRY_AFTER_S

    def folder_of(self, job_id: str) -> Path:
        return self.folder / job_id

    def new_job_id(self) -> str:
        return uuid.uuid4().hex

    async def submit(self, job_id: str, upload: Upload, files: Sequence[Sent]) -> Job:
        """A job for the files received into `folder_of(job_id)`, queued."""
        job = Job(
            job_id,
            upload.collection,
            upload.source_type,
            upload.source,
            self.owner,
            [
                job_file(sent, self.max_file_mb, own)
                for sent, own in zip(files, upload.source_types or ("",) * len(files), strict=True)
            ],
            dates={
                name: date
                for name, date in (
                    ("created_at", upload.created_at),
                    ("updated_at", upload.updated_at),
                )
                if date
            },
            acl=None if upload.acl is None else list(upload.acl),
        )
        await self.jobs.save(job)
        self.queue.put_nowait(job.id)
        return job

    async def resume(self) -> None:
        """This service's jobs left queued or running: queued again when their files are
        here, failed (saying why) when they are not. Another service's job that has not
        moved for ABANDONED_AFTER is failed too: its service is gone (a replica removed),
        and no job stays running for ever."""
        for job in await self.jobs.unfinished():
            if job.owner != self.owner:
                if abandoned(job):
                    job.status = FAILED
                    job.reason = (
                        f"abandoned: the service holding its files ({job.owner}) has not "
                        f"worked on it since {job.updated_at}"
                    )
                    await self.jobs.save(job)
            elif self.folder_of(job.id).is_dir():
                log.info("resuming upload job %s (%s)", job.id, job.status)
                job.status = QUEUED
                await self.jobs.save(job)
                self.queue.put_nowait(job.id)
            else:
                job.status = FAILED
                job.reason = "the service restarted and the job's files are gone"
                await self.jobs.save(job)

    async def work(self) -> None:
        while True:
            job_id = await self.queue.get()
            try:
                job = await self.jobs.get(job_id)
                if job is not None and job.status in (QUEUED, RUNNING):  # running: stopped
                    await self.run(job)
            except KnowledgeAPIError as e:  # its writes failed: the files stay, and the job
                # goes on from its last record once they succeed
                log.error(
                    "upload job %s stopped: %s; tried again in %g s",
                    job_id,
                    e.message,
                    self.retry_after,
                )
                asyncio.get_running_loop().call_later(
                    self.retry_after, self.queue.put_nowait, job_id
                )
            except Exception:  # a bug: logged, and the next job runs
                log.exception("upload job %s stopped", job_id)

    async def run(self, job: Job) -> None:
        try:
            await run_job(self.service, job, self.folder_of(job.id))
        except Exception as e:
            if writes_failed(e):
                raise  # tried again (work)
            # a bug: the job says so, the worker goes on
            log.exception("upload job %s failed", job.id)
            job.status = FAILED
            job.reason = e.message if isinstance(e, KnowledgeAPIError) else f"{type(e).__name__}"
            await self.jobs.save(job)
        if job.status in (DONE, FAILED):
            shutil.rmtree(self.folder_of(job.id), ignore_errors=True)


@asynccontextmanager
async def upload_jobs(service: KnowledgeService) -> AsyncIterator[UploadJobs]:
    """While the service runs: its unfinished jobs resumed, then new ones run as they
    come. A job running when the service stops stays `running` in the store, and is
    resumed at the next start."""
    uploads = UploadJobs(service)
    try:
        await uploads.resume()
    except KnowledgeAPIError as e:  # a store that does not answer: /health says so
        log.warning("upload jobs not resumed: %s", e.message)
    task = asyncio.create_task(uploads.work(), name="upload-jobs")
    try:
        yield uploads
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def writes_failed(error: Exception) -> bool:
    """Whether the store or its disk could not take a write (a full disk, a store
    gone): a job is tried again later, not failed. (An embedder that did not load stays
    so until a restart, which resumes the job.)"""
    return (
        isinstance(error, KnowledgeStoreError)
        and error.status == 503
        and not isinstance(error, EmbeddingError)
    )


def abandoned(job: Job) -> bool:
    updated = datetime.fromisoformat(job.updated_at)
    return datetime.now(UTC) - updated > ABANDONED_AFTER


def job_file(sent: Sent, max_file_mb: int, source_type: str = "") -> JobFile:
    """The file's entry in its job (with its own source type, if given): failed at once
    when it cannot be read at all. A NUL in the name it was sent with is written `\\x00`
    (no store keeps a NUL in a text)."""
    name = sent.name.replace(NUL, "\\x00")
    entry = JobFile(name, sent.path.name, sent.size, source_type=source_type)
    reason = refusal(sent, max_file_mb)
    if reason:
        entry.state, entry.reason = "failed", reason
    return entry


def refusal(sent: Sent, max_file_mb: int) -> str:
    """Why a file is refused before it is read, or ""."""
    if not sent.name.strip():
        return "no file name"
    if NUL in sent.name:
        return "unsafe file name: it holds the NUL character"
    if not safe_name(sent.name):
        return "unsafe file name: an absolute path or one with '..' is not accepted"
    if sent.too_large:
        return f"too large: over the {max_file_mb} MB limit (KNOWLEDGE_MAX_FILE_MB)"
    if sent.size == 0:
        return "empty file: 0 bytes"
    return ""


def safe_name(name: str) -> bool:
    """A relative path without `..`, in POSIX or Windows spelling."""
    for path in (PurePosixPath(name), PureWindowsPath(name)):
        if path.is_absolute() or path.anchor or ".." in path.parts:
            return False
    return True


async def run_job(service: KnowledgeService, job: Job, folder: Path) -> None:
    records = service.records
    job.status = RUNNING
    pending = [file for file in job.files if file.state == "pending"]
    read: list[tuple[JobFile, list[Document]]] = []
    indexed: list[Document] = []
    for file in pending:
        try:
            documents, left_out = await service.catalog.read_upload(
                folder / file.stored,
                file.name,
                file.source_type or job.source_type,
                job.collection,
                job.dates,
            )
        except ExtractionError as e:
            file.state, file.reason = "failed", f"{e.reason}: {e.detail}" if e.detail else e.reason
        else:
            file.chunks = sum(len(doc.chunks) for doc in documents)
            file.reason = left_out
            read.append((file, documents))
    job.chunks_total = sum(file.chunks for file in job.files if file.state != "failed")
    await records.save_job(job)
    if job.acl is not None:
        await service.sources.set_acl(job.collection, job.source, job.acl)
    acl = await service.sources.acl_of(job.collection, job.source)
    for file, documents in read:
        for doc in documents:
            doc.acl = doc.acl if acl is None else acl
        try:
            summary = await service.ingest(documents, source=job.source)
        except KnowledgeAPIError as e:
            if writes_failed(e):
                raise  # the file stays pending, for the job's next try
            file.state, file.reason = "failed", e.message
        else:
            file.state = "done"
            job.chunks_done += file.chunks
            job.embedded += summary.embedded
            indexed += documents
        await records.save_job(job)
    finish(job)
    if indexed:  # recorded before the job shows done: a reader who saw it done finds it
        written = changes(indexed, None, job_id=job.id, embedded=job.embedded)
        await service.audit(Actor(f"job:{job.id}"), "upload job", job.collection, written)
    await records.save_job(job)


def finish(job: Job) -> None:
    """done when any file was indexed (the others' errors listed), failed otherwise."""
    job.chunks_total = sum(file.chunks for file in job.files if file.state == "done")
    if any(file.state == "done" for file in job.files):
        job.status = DONE
    else:
        job.status = FAILED
        job.reason = f"none of the {len(job.files)} files could be indexed"
