"""The MCP server: the knowledge base's tools for MCP clients, over stdio (`knowledge-api mcp`)
or mounted in the HTTP app at /mcp (`endpoint.py`)."""
