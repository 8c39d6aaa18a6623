"""``weirdnet bench context``: does each model use long context (issue 31)."""
