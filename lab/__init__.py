"""The lab: studies, probes and the suite's kernels' variants. It imports the suite and the plugin, never the reverse:
nothing in perftests/, plugin/ or tests/ imports it."""
