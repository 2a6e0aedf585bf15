"""Store commands: merge, stats, verify."""
