"""The doctor: short real probe fits (harness/), checks registered by id (checks/), the report."""
