"""The lab: studies and probes that import the suite and the plugin, never the reverse."""
