"""Procedural memory: experience templates, their library service, SQL repository and vector index."""
