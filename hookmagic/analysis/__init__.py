"""Analyses: pure functions from traces and profiles to DataFrames and small result objects.

Nothing here draws, prints, writes files or keeps global state; views draw what these return.
Import the module you need (``hookmagic.analysis.summary``, ...): this package imports nothing
eagerly so that one analysis never pays for another's imports.
"""
