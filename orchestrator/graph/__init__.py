"""A graph file from YAML to something runnable: bounded YAML (`yamlfile.py`), the typed spec,
the checks, compilation into a `CompiledGraph` (`compiled.py`), output schemas, and the
templates with the sandbox they render in."""
