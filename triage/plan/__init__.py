"""Planning ahead: a model's config.json and a GPU into the lengths and KV cache that fit."""
