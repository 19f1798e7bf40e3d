"""Aligning a judge to a few human labels: the pure parts `orc.align` is built from.

`split` keeps a test set the search never sees and deals the rest into folds, `shots`
draws labelled examples as few-shot records, `variants` builds each configuration's graph
dict, `scoring` measures agreement and compares baseline and aligned on the test set,
`isotonic` maps the judge's score monotonically onto the people's scale, `writer` leaves
the aligned graph folder, and `record` holds the typed result.
"""
