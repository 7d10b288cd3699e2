"""The backends under contract: the simulator, the fake vLLM server, and (integration) real vLLM."""

from __future__ import annotations

import pytest

from tests.contract.adapters import Adapter, FakeAdapter, RealVllmAdapter, SimAdapter
from tests.integration.conftest import tiny_model, vllm_python  # noqa: F401 - fixtures for the real case


@pytest.fixture(scope="session", params=["sim", "fake", pytest.param("vllm", marks=pytest.mark.integration)])
def case(request, tmp_path_factory) -> Adapter:
    if request.param == "sim":
        adapter: Adapter = SimAdapter()
    elif request.param == "fake":
        adapter = FakeAdapter(tmp_path_factory.mktemp("fake"))
    else:
        adapter = RealVllmAdapter(request.getfixturevalue("vllm_python"), request.getfixturevalue("tiny_model"))
    yield adapter
    adapter.close()
