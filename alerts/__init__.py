"""alerts package."""
