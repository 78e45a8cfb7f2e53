"""Layered long-term memory: policy, service, promotion, maintenance, SQL repository, lexical search and vectors."""
