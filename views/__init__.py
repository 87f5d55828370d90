"""views package."""
