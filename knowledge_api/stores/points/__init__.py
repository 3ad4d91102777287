"""The stores whose engines keep points with metadata: Chroma and Qdrant."""
