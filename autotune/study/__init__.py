"""The study: a trial loop (Optuna ask/tell over a pool of workers, with callbacks), the
typed trial record, the search strategy, recovery, and the Pareto/export rule."""
