"""Rules: the YAML rule model, its loading, cache, expressions and self-tests."""
