"""The run store: MLflow tracking, the run record, checkpoints, the reference posterior, provenance, a run's note and ``--json`` output. With ``serve/`` the only package that imports MLflow."""
