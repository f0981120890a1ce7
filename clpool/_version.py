"""The one place clpool's version is kept (pyproject.toml reads it too)."""

__version__ = "0.1.0"
