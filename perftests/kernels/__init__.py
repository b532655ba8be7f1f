"""Kernels under test, each with its launcher and eager reference."""
