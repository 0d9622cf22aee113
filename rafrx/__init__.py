"""rafrx: a streaming message model for LLM agents, on ReactiveX."""
