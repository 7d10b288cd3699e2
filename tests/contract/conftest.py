"""The backends under contract: the simulator, the fake vLLM server, and (integration) real vLLM
(the session's real_vllm, tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.contract.adapters import Adapter, FakeAdapter, RealVllmAdapter, SimAdapter


@pytest.fixture(scope="session", params=["sim", "fake", pytest.param("vllm", marks=pytest.mark.integration)])
def case(request, tmp_path_factory) -> Adapter:
    if request.param == "vllm":
        real: RealVllmAdapter = request.getfixturevalue("real_vllm")  # the session's, closed by its fixture
        yield real
        return
    adapter: Adapter = SimAdapter() if request.param == "sim" else FakeAdapter(tmp_path_factory.mktemp("fake"))
    yield adapter
    adapter.close()
