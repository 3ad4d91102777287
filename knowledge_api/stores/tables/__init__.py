"""Tables kept beside a store's data: API keys, the audit trail, feedback, upload jobs."""
