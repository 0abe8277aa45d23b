"""linalg opdsl (see lang)."""
