"""Reporting: tables, files and figures from experiment results."""
