"""The route table: thin handlers, one module per resource."""

from starlette.routing import Route

from knowledge_api.routes import answer, detail, documents, health, query, retrieve, support

ROUTES = [
    Route("/health", health.health, methods=["GET"]),
    Route("/v1/knowledge/query", query.query, methods=["POST"]),
    Route("/v1/knowledge/answer", answer.answer, methods=["POST"]),
    Route("/v1/knowledge/retrieve", retrieve.retrieve, methods=["POST"]),
    Route("/v1/knowledge/validate", retrieve.validate, methods=["POST"]),
    Route("/v1/knowledge/support", support.support, methods=["POST"]),
    Route("/v1/knowledge/detail/{type}/{id:path}", detail.detail, methods=["GET"]),
    Route("/v1/knowledge/documents", documents.create, methods=["POST"]),
    Route("/v1/knowledge/documents/{id}", documents.get, methods=["GET"]),
    Route("/v1/knowledge/documents/{id}", documents.delete, methods=["DELETE"]),
]
