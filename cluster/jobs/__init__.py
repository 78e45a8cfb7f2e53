"""Scheduled jobs: their state in SQL (lease, last run, result, watermark) and how one run is held."""
