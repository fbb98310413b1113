"""Closed-form costs of compiled kernels: what a search can afford to ask thousands of times."""
