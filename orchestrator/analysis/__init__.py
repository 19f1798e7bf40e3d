"""Analyses over finished run folders: comparing runs, exporting and rating their results."""
