"""Synthetic sequence-to-sequence tasks."""
