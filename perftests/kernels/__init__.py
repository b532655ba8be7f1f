"""Kernels under test, each with its launcher and eager reference; and the all-reduce algorithms built on them."""
