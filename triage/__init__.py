"""vllm-triage: diagnose vLLM context-length and KV-cache failures from logs."""

__version__ = "0.1.0"
