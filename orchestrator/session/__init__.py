"""One run, whoever asked for it: the run plan built from the caller's settings (`plan.py`),
the run in phases (`session.py`), the run's params checked, what it reports at the end
(summary, failures)."""
