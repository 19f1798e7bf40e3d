"""The terminal's view of the package: the live progress of a run (`progress.py`, a bar on a
terminal and plain logged lines off one) and the tables of what `analysis/` returns
(`tables.py`). The one place below the CLI that imports `rich`."""
