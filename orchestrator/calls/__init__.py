"""LLM calls in layers: StructuredCaller (validate, re-ask) → CachedCaller → Sender with a
RetryPolicy → each endpoint's provider (orchestrator.providers: OpenAI-compatible, batch or
the in-process fake), over a ServerRegistry."""
