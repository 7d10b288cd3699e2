"""The backends by name and what each one's figures are: the one declaration every layer reads.

A fact about a backend that more than its implementation needs (the space schema checks the
name, the export header and the MLflow description say whether figures are simulated, the
service decides whether Ray must see real GPUs) lives here, in the neutral layer, because
those layers may not import ``autotune.backends``. ``autotune.backends.registry`` maps the
same names to their implementations; ``tests/architecture/test_registries.py`` checks that
the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackendKind:
    name: str
    # Its figures come from the simulator, not from a GPU: every place that shows them says
    # so, and the simulator's own checks (known GPU and model, modelled flags) apply.
    simulated: bool
    # It runs engines on the GPUs Ray gives each worker. One that does not still keeps the
    # GPU placement path, so a local Ray is given logical GPUs for it.
    needs_gpus: bool
    purpose: str  # what it is for, as the CLI says it


_KINDS = (
    BackendKind("sim", simulated=True, needs_gpus=False, purpose="the simulator"),
    BackendKind("vllm", simulated=False, needs_gpus=True, purpose="real vLLM on GPUs"),
    BackendKind("noop", simulated=False, needs_gpus=False, purpose="measures autotune's own overhead"),
)
BACKEND_KINDS: dict[str, BackendKind] = {k.name: k for k in _KINDS}
BACKEND_NAMES: tuple[str, ...] = tuple(BACKEND_KINDS)


def is_simulated(name: str) -> bool:
    """Whether backend ``name`` reports simulated figures (an unknown name: no)."""
    kind = BACKEND_KINDS.get(name)
    return kind is not None and kind.simulated


def needs_gpus(name: str) -> bool:
    """Whether backend ``name`` runs on real GPUs (an unknown name: yes, the cautious answer)."""
    kind = BACKEND_KINDS.get(name)
    return kind is None or kind.needs_gpus


def backend_choices() -> str:
    """The names with what each is for, as an error message offers them."""
    parts = [f"{k.name} ({k.purpose})" for k in _KINDS]
    return ", ".join(parts[:-1]) + " or " + parts[-1]
