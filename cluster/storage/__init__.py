"""Shared storage plumbing: the SQL database and its migrations, the Milvus connection."""
