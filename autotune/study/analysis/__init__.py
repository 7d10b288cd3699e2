"""What the trials show: per-config statistics and evidence (intervals, pooled run-to-run spread,
OOM bounds), memory headroom, the Pareto front of configs, and the export rule that picks the
recommended config. Reads records only: no Optuna writes, no search.
"""

from __future__ import annotations

from autotune.study.analysis.evidence import (
    OOM_METRIC,
    SHOWN_METRICS,
    ConfigEvidence,
    StudyEvidence,
    config_key,
    summarize,
)
from autotune.study.analysis.export_rule import (
    DEFAULT_MAX_OOM_PER_1K,
    LATENCY,
    MEASURED,
    SHOWN,
    Choice,
    Ranking,
    choose,
    choose_for_export,
    finalists,
    recommendation,
    study_evidence,
)
from autotune.study.analysis.pareto import (
    FrontCache,
    FrontPoint,
    config_front,
    front_points,
    pareto_numbers,
    pareto_trials,
)
from autotune.study.analysis.stats import (
    beta_cdf,
    beta_quantile,
    clopper_pearson_upper,
    mean_interval,
    pooled_log_sd,
    pooled_relative_sd,
    t_cdf,
    t_quantile,
    trials_needed,
    with_prior_sd,
)

__all__ = ["Choice", "ConfigEvidence", "DEFAULT_MAX_OOM_PER_1K", "FrontCache", "FrontPoint", "LATENCY", "MEASURED", "OOM_METRIC", "Ranking", "SHOWN", "SHOWN_METRICS", "StudyEvidence", "beta_cdf", "beta_quantile", "choose", "choose_for_export", "clopper_pearson_upper", "config_front", "config_key", "finalists", "front_points", "mean_interval", "pareto_numbers", "pareto_trials", "pooled_log_sd", "pooled_relative_sd", "recommendation", "study_evidence", "summarize", "t_cdf", "t_quantile", "trials_needed", "with_prior_sd"]
