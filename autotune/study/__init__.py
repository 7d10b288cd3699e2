"""The study: Optuna ask/tell over a pool of workers, split by concern (Optuna's study/,
samplers/, storages/ split is the model):

- ``trials``: what one trial is (the typed record, sampled flags, what Optuna is told);
- ``analysis``: what the trials show (statistics, evidence, headroom, Pareto front, export rule);
- ``storages``: where the study lives (retrying SQLAlchemy storage, recovery of dead drivers);
- ``search``: how the next trial is chosen (samplers, proposal, pruning, screen, confirmation);
- ``loop``: the trial loop, its worker-pool protocol and callbacks;
- ``display``: the terminal display of a running study.

Each subpackage may import only those above it in this list (tests/architecture enforces it),
and each one's ``__init__`` is its public surface.
"""
