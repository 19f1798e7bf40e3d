"""The Python API: graphs and rows in, typed records out (`run.py`: `run`, `arun`, `RunResult`,
`load_graph`, `graph_from_dict`; `card.py`: `judge_card`; `runner.py`: the deprecated
`execute(RunConfig)` shim). `orchestrator/__init__.py` re-exports the public names."""
