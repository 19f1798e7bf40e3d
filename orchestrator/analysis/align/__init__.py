"""Aligning a judge to a few human labels: the pure parts `orc.align` is built from.

`labels` reads one truth per example and codes answers and labels as numbers, `split`
keeps a test set the search never sees and deals the rest into folds, `shots` draws
labelled examples as few-shot records, `variants` builds each configuration's graph dict,
`answers` reads the node's answers from a run, `scoring` measures agreement and compares
baseline and aligned on the test set, `search` scores configurations over folds and picks
one, `isotonic` maps the judge's score monotonically onto the people's scale, `writer`
leaves the aligned graph folder, and `record` holds the typed result.
"""
