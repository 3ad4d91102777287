"""Connector sources over HTTP: POST /v1/knowledge/sources registers one (admin), POST
/v1/knowledge/sources/{name}/sync runs one as a job (202; GET /v1/knowledge/jobs/{id})."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from knowledge_api import validation
from knowledge_api.connectors.registry import connectors
from knowledge_api.errors import InvalidRequest
from knowledge_api.ledger import QUEUED
from knowledge_api.models import DEFAULT_COLLECTION, ConnectorSource
from knowledge_api.routes.audit import actor
from knowledge_api.usecases import connectors as use
from knowledge_api.usecases.connectors import SyncJobs
from knowledge_api.views import acl_field
from knowledge_api.web.access import access
from knowledge_api.web.fields import Body, Boolean, CollectionName, Custom, Text
from knowledge_api.web.http import JSONResponse, read_json, service
from knowledge_api.web.schema import STRING, enum, obj

KINDS = tuple(connectors.names())
STRINGS = {"type": "object", "additionalProperties": {"type": "string", "maxLength": 1000}}


def strings(field: str) -> Any:
    """An object of strings (settings, or secrets naming environment variables)."""

    def check(value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) <= 1000 for k, v in value.items()
        ):
            raise InvalidRequest(field, "must be an object of strings")
        return {k.strip(): v.strip() for k, v in value.items()}

    return check


ADD = Body(
    "ConnectorSource",
    Custom(
        "name",
        "The source's name, unique in its collection.",
        check=lambda value: validation.source_name(value, "name"),
        shape={"type": "string", "pattern": validation.SOURCE_PATTERN},
    ),
    Custom(
        "kind",
        "The connector kind.",
        check=lambda value: value if value in KINDS else bad_kind(),
        shape={"type": "string", "enum": list(KINDS)},
    ),
    Text("url", "Where the service answers (imap://, imaps://, http://).", max_length=2000),
    CollectionName("collection", "The collection its documents go to.", DEFAULT_COLLECTION),
    Custom("settings", "The kind's settings, by name.", None, strings("settings"), STRINGS),
    Custom(
        "secrets",
        "Secrets by setting, each the NAME of an environment variable of the service "
        "(the value is read at each sync, never stored).",
        None,
        strings("secrets"),
        STRINGS,
    ),
    acl_field(
        "Who may read its documents (public, user:<id>, group:<name>); absent or empty: "
        "closed, admin keys only, until an access list is set.",
        (),
    ),
)
SYNC = Body(
    "SourceSync",
    Custom(
        "collection",
        "The source's collection (default: the one holding it).",
        None,
        lambda value: None if value is None else validation.collection_name(value, "collection"),
        {"type": "string", "pattern": validation.COLLECTION_PATTERN},
    ),
    Boolean("full", "Read everything, not only what changed since the cursor.", False),
    Boolean("allow_mass_delete", "Prune even past KNOWLEDGE_PRUNE_MAX_FRACTION.", False),
)
ACCEPTED = obj({"job_id": STRING, "status": enum(QUEUED), "source": STRING, "collection": STRING})


def bad_kind() -> str:
    raise InvalidRequest("kind", f"must be one of: {', '.join(KINDS)}")


async def add(request: Request) -> Response:
    values = ADD.parse(await read_json(request))
    collection = access(request).collection(values["collection"])
    source = ConnectorSource(values["kind"], values["url"], values["settings"], values["secrets"])
    added = await use.add_source(
        service(request), collection, values["name"], source, values["acl"]
    )
    changed = {"source": values["name"], "kind": source.kind, "acl": list(values["acl"])}
    await service(request).audit(actor(request), "POST /v1/knowledge/sources", collection, changed)
    return JSONResponse(
        use.source_view(added, service(request).settings.sync_interval), status_code=201
    )


async def sync(request: Request) -> Response:
    name = validation.source_name(request.path_params["name"], "name")
    payload = await read_json(request) if await request.body() else {}
    values = SYNC.parse(payload)
    caller = access(request)
    wanted = values["collection"] and caller.collection(values["collection"])
    info, source = await use.find_source(service(request), name, wanted or None)
    caller.collection(info.collection)
    jobs: SyncJobs = request.app.state.syncs
    job = await jobs.submit(
        info, source, actor(request), values["full"], values["allow_mass_delete"]
    )
    return JSONResponse(
        {"job_id": job.id, "status": job.status, "source": name, "collection": info.collection},
        status_code=202,
    )
