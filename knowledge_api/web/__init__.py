"""The HTTP plumbing the resources stand on: request parsing and field declarations
(`fields`), the error shape and JSON responses (`http`), access and the rate limit
(`access`), request ids and the request log (`observe`), metrics, redaction, streams,
uploads received as they arrive (`multipart`), Server-Sent Events, request spans and
the hit path of repeated queries (`hot`). The resources themselves are in routes/.
"""
