"""Plumbing shared by the pages. Import the submodule you need (``pages.common.scenario``...);
this package imports nothing itself."""
