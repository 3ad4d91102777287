"""The route table: thin handlers, one module per resource."""

from starlette.routing import Route

from knowledge_api.routes import detail, documents, health, query

ROUTES = [
    Route("/health", health.health, methods=["GET"]),
    Route("/v1/knowledge/query", query.query, methods=["POST"]),
    Route("/v1/knowledge/detail/{type}/{id:path}", detail.detail, methods=["GET"]),
    Route("/v1/knowledge/documents", documents.create, methods=["POST"]),
    Route("/v1/knowledge/documents/{id}", documents.get, methods=["GET"]),
    Route("/v1/knowledge/documents/{id}", documents.delete, methods=["DELETE"]),
]
