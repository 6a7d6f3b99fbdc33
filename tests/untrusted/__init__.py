"""Untrusted-input tests, one file per boundary (a package: their names repeat those of other suites)."""
