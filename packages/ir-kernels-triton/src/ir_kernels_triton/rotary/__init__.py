"""Rotary position embedding (`kernel`)."""
