"""The history of gate runs: a SQLite store, change points in each case's speedup, and pages that draw them."""

from __future__ import annotations
