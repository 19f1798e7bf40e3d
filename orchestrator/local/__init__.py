"""The embedded default judge: vLLM's CPU build serving a tiny model on this machine
(`server.py`), and that model, converted once from a GGUF (`model.py`)."""
