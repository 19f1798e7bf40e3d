"""Compute nodes: registered pure functions a graph file can call by name."""

from .registry import ComputeFunction, names, register, registered, resolve

__all__ = ["ComputeFunction", "names", "register", "registered", "resolve"]
