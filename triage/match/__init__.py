"""Matching: the anchor pass over raw chunks, then the rules' full patterns on candidate lines."""
