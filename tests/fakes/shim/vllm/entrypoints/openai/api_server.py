"""Stands in for vLLM's module so ``python -m vllm.entrypoints.openai.api_server`` starts the fake.

Put ``tests/fakes/shim`` first on PYTHONPATH (ServerSpec.env) and the backend's real code path
(argument list, process group, /health, streaming, log classification) runs against the fake.
"""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # tests/fakes
    from fake_vllm_server import main

    main(sys.argv[1:])
