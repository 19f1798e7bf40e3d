"""Where a run is kept and read back: typed records, the run store protocol and the in-memory
store, the run folder with its lock and run key, the decision trace, the one reader, and the
response cache."""
