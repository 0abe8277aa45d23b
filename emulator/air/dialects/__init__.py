"""Dialects of the emulated air package."""
