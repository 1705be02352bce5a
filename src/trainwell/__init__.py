"""trainwell: a Lightning + Hydra template in which silent training failures cannot stay silent."""

__version__ = "0.1.0"
