"""Borealis DPC experiments (SIGMOD 2005, section 7) reproduced on hastream with a real broker: ``hastream bench borealis``."""
