"""The study driver: Optuna ask/tell over Ray workers, tracked in MLflow."""
