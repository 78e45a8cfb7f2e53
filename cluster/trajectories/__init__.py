"""Trajectories: capture models, the capture service, the SQL repository, the analysis queue and tables."""
