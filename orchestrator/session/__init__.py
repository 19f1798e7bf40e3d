"""One run, whoever asked for it: the run's params checked, its composition (`session.py`), the
`execute` entry of the CLI (`runner.py`), and what it reports at the end (summary, failures)."""
