"""Running a compiled graph over rows: the scheduler (examples × nodes, under the endpoint
limits) and the flush loop that writes finished work and tells a progress display."""
