"""Reading what vLLM measures itself: one server's /metrics and /v1/models, or a fleet's through Prometheus."""
