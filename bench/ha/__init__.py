"""The HA algorithms paper's evaluation (ICDE 2005, section 7) on hastream: ``python -m bench.ha``."""
