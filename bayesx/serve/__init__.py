"""Serving the store: ``bayesx server`` (PostgreSQL + MLflow), its authentication and MLflow app, ``bayesx ui``."""
