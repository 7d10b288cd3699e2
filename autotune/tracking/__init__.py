"""MLflow tracking: an experiment per study, a parent run per invocation, a child per trial."""
