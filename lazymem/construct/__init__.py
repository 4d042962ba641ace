"""Construct selectively: history windowing and the memory model's KEEP/DROP decisions."""
