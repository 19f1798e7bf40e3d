"""What a server is to a run: its endpoints (one URL or several replicas of a model), their
in-flight limits and how they are tuned, an outage waited out, a server started on first
use, each node's endpoint checked once, and the servers a re-ask from a folder may ask."""
