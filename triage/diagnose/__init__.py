"""Diagnosis: events and the facts of each run turned into findings, and the CI gate."""
