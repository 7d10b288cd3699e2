"""One list each (issue 22): where a set of names is declared in one place and mapped to
implementations in another, the two hold the same names."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import ValidationError

from autotune.backend_kinds import BACKEND_KINDS, BACKEND_NAMES, is_simulated, needs_gpus
from autotune.backends.registry import BACKENDS, get_backend
from autotune.space.schema import StudySection
from autotune.study.search.samplers import SAMPLERS
from autotune.workload import TRACE_FORMATS, TraceSource
from autotune.workload.files import READERS


def test_every_backend_name_has_an_implementation_and_no_other_does():
    assert set(BACKENDS) == set(BACKEND_NAMES)


def test_each_implementation_answers_to_its_name():
    for name in BACKEND_NAMES:
        backend = get_backend(name)
        try:
            assert backend.name == name
        finally:
            backend.close()


def test_only_the_simulator_reports_simulated_figures_and_only_vllm_needs_gpus():
    assert [n for n in BACKEND_NAMES if is_simulated(n)] == ["sim"]
    assert [n for n in BACKEND_NAMES if needs_gpus(n)] == ["vllm"]
    assert not is_simulated("tgi") and needs_gpus("tgi")  # unknown: the cautious answers
    assert all(k.name == n for n, k in BACKEND_KINDS.items())


def test_the_schema_accepts_exactly_the_trace_formats_with_a_reader():
    assert TRACE_FORMATS == tuple(READERS) and all(r.name == n for n, r in READERS.items())
    for name in ("auto", *TRACE_FORMATS):
        assert TraceSource(path="t", format=name).format == name
    with pytest.raises(ValidationError, match="unknown trace format 'sharegpt'"):
        TraceSource(path="t", format="sharegpt")


def test_the_schema_accepts_exactly_the_samplers_with_a_factory():
    """study.sampler's Literal (the space may not import the study) names what SAMPLERS declares."""
    assert get_args(StudySection.model_fields["sampler"].annotation) == tuple(SAMPLERS)
