"""Rows in: datasets read lazily from JSONL or CSV, and the row sources a run takes its
examples from (files, lists of dicts, DataFrames, Hugging Face datasets)."""
