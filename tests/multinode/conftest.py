"""Real vLLM (CPU build) for the multi-node test: skipped without it, failed under
AUTOTUNE_REQUIRE_INTEGRATION=1 (tests/integration/conftest.py decides)."""

from tests.integration.conftest import vllm_python  # noqa: F401 - the fixture
