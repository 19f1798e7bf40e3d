"""LLM calls in layers: StructuredCaller (validate, re-ask) → CachedCaller → Sender with a
RetryPolicy → Transport (the OpenAI SDK, or the in-process fake), over a ServerRegistry."""
