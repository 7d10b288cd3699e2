"""Export the chosen config as a YAML that `vllm serve --config` loads."""
