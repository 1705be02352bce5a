"""Small modules the engine's tests own: plain Lightning classes that import nothing from the
template's examples (`project`), so the engine's suite stays green when a cloner deletes them.

Their configs are tests/conf/{data,model}/owned.yaml, reached with `OWNED` (tests/helpers/config.py).
"""
