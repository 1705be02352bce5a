"""What the tests share: config composition, trainers, script runs, checkpoint comparisons and
the support modules that test runs load by `_target_` (killer, hold). Fixtures live in
tests/conftest.py; nothing here imports a test file."""
