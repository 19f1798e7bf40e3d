"""Providers: how a run's requests reach what answers them. `base` holds the typed request
and reply and the protocols; `openai_compat` (OpenAI-compatible servers, vLLM), `batch`
(batch files) and `fake` (in-process, for tests) implement them; `registry` names the
built-in ones. See docs/providers.md."""
