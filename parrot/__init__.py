"""Parrot."""
