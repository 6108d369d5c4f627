"""The package version (its own module so that library modules can read it without importing
the package's public face)."""

__version__ = "0.1.0"
