"""Executing runs and sweeps: the runner, sweeps and their executors, the machine's state."""
