"""Truth families: how a benchmark truth departs from autotune's nominal simulator.

* ``constants`` (issue 12's truths): every uncertain constant of ``SimProfile`` drawn
  log-uniformly within its range (``SimProfile.perturbed(seed)``), the structure untouched.
  On the p99 scenarios such a truth is the nominal model times one factor with a 2-5 %
  residual, and calibration fits exactly those constants: a truth autotune's model can
  always fit, so it flatters the model.
* ``structural`` (the default): the constants drawn as above, plus structural departures the
  model has no constant for (``autotune.sim.quirks``: GEMM tile/wave quantisation, CUDA-graph
  padding, another attention cost curve, fp8 KV that costs time on A100, a prefill-chunk
  scheduler variant, fragmentation that grows with uptime, super-linear per-sequence CPU
  cost, and a smooth random field of 5-15 % over the config space), and noise a real cluster
  has: a persistent speed offset per node, drift over the study's clock, heavy-tailed
  outlier runs and a KV cache sized a little differently at each start (bimodal p99 near a
  KV cliff). Each truth draws which mechanisms apply and how strongly; the probabilities and
  ranges below are the family's whole definition, and docs live with each mechanism in
  ``autotune/sim/quirks.py``.

The study never sees a family's draws: they reach only the benchmark's backend
(:class:`TruthBackend`) and the brute force that says what is truly best.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from autotune.backends.base import TrialRequest
from autotune.backends.sim import SimBackend
from autotune.deploy import SimProfile
from autotune.results import TrialResult
from autotune.sim.quirks import NONE, Quirks
from experiments.reality_gap.seeds import draw_seed

FAMILIES = ("structural", "constants")
DEFAULT_FAMILY = "structural"


@dataclass(frozen=True)
class TruthDraw:
    """One truth's physics (profile with noise on, quirks) and its cluster's noise."""

    family: str
    profile: SimProfile
    quirks: Quirks = NONE
    node_sigma: float = 0.0  # log-normal spread of a node's persistent speed offset
    drift_per_hour: float = 0.0  # relative change of every node's speed per hour of study clock
    mechanisms: tuple[str, ...] = field(default=())

    def describe(self) -> dict[str, Any]:
        return {"family": self.family, "mechanisms": list(self.mechanisms), "node_sigma": self.node_sigma,
                "drift_per_hour": self.drift_per_hour,
                "quirks": self.quirks.to_dict() if self.quirks.active else None}


def draw(base: SimProfile, family: str, scenario: str, truth_seed: int) -> TruthDraw:
    """Truth ``truth_seed`` of ``scenario`` in ``family``, around the space's profile ``base``."""
    if family == "constants":
        return TruthDraw(family, base.perturbed(truth_seed))
    if family == "structural":
        return _structural(base, scenario, truth_seed)
    raise ValueError(f"unknown truth family {family!r}: use one of {', '.join(FAMILIES)}")


def _u(rng: random.Random, lo: float, hi: float) -> float:
    return rng.uniform(lo, hi)


def _log_u(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _structural(base: SimProfile, scenario: str, truth_seed: int) -> TruthDraw:
    rng = random.Random(draw_seed("structural", scenario, truth_seed))
    profile = base.perturbed(rng.getrandbits(48))
    on: list[str] = []
    q: dict[str, Any] = {}

    def maybe(name: str, chance: float) -> bool:
        hit = rng.random() < chance  # always drawn, so one mechanism's draw never shifts another's
        if hit:
            on.append(name)
        return hit

    # Each mechanism's chance and range: the family's definition (module docstring).
    if maybe("gemm_waves", 0.6):
        q.update(gemm_tile=rng.choice([64, 128, 256]), gemm_wave=_u(rng, 0.4, 1.0))
    if maybe("graph_padding", 0.8):
        q.update(graph_padding=True)
    if maybe("attention_curve", 0.6):
        q.update(attn_ctx_exp=_u(rng, -0.15, 0.35), attn_ctx_ref=_log_u(rng, 512.0, 8192.0))
    if maybe("fp8_kv_dequant", 0.8):
        q.update(fp8_kv_penalty=_u(rng, 0.2, 1.2))  # acts only on GPUs without FP8 units
    if maybe("prefill_chunk_cap", 0.4):
        q.update(prefill_chunk_cap=rng.choice([256, 512, 1024, 2048]))
    if maybe("fragmentation_uptime", 0.5):
        q.update(frag_growth=_u(rng, 0.2, 1.0), frag_horizon_s=_log_u(rng, 300.0, 1200.0))
    if maybe("cpu_superlinear", 0.6):
        q.update(cpu_knee=_log_u(rng, 32.0, 256.0), cpu_power=_u(rng, 1.0, 2.0))
    on.append("smooth_field")
    q.update(field_amp=_u(rng, 0.05, 0.15), field_seed=rng.getrandbits(32), field_scale=_u(rng, 1.0, 2.5))
    # Noise a cluster has (acts only with the profile's noise on: never in the brute force).
    q.update(outlier_chance=_u(rng, 0.02, 0.08), outlier_scale=_u(rng, 0.1, 0.5), kv_jitter=_u(rng, 0.01, 0.04))
    return TruthDraw("structural", profile, Quirks(**q), node_sigma=_u(rng, 0.01, 0.04),
                     drift_per_hour=_u(rng, -0.005, 0.01), mechanisms=tuple(on))


class TruthBackend:
    """The benchmark's backend: the sim backend running a truth, with the truth's per-node
    offsets and drift. ``SimClockPool`` calls :meth:`run_on_worker` with the worker and the
    simulated clock, as a trial on a real cluster runs on one node at one time."""

    name = "sim"

    def __init__(self, truth: TruthDraw) -> None:
        self.truth = truth
        self._offsets: dict[int, float] = {}

    def node_speed(self, worker: int, now_s: float) -> float:
        t = self.truth
        if worker not in self._offsets:
            rng = random.Random(f"{t.family}/node/{worker}/{t.quirks.field_seed}")
            self._offsets[worker] = rng.lognormvariate(0.0, t.node_sigma) if t.node_sigma else 1.0
        return self._offsets[worker] * (1.0 + t.drift_per_hour * now_s / 3600.0)

    def quirks_on(self, worker: int, now_s: float) -> Quirks:
        """The quirks a run on ``worker`` at ``now_s`` carries: the truth's, at that node's speed."""
        t = self.truth
        if t.node_sigma or t.drift_per_hour:
            return t.quirks.with_speed(self.node_speed(worker, now_s))
        return t.quirks

    def run_on_worker(self, request: TrialRequest, worker: int, now_s: float) -> TrialResult:
        return SimBackend(profile=self.truth.profile, quirks=self.quirks_on(worker, now_s)).run_trial(request)

    def run_trial(self, request: TrialRequest) -> TrialResult:
        return self.run_on_worker(request, 0, 0.0)

    def close(self) -> None:
        pass
