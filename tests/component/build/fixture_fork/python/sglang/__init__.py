"""Stand-in for the SGLang fork in the build role tests."""

__version__ = "0.0.1"
