"""The doctor: debugging probes on the configured experiment, a readiness report, training guards."""
