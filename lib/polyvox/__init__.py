"""polyvox: the library under *Many Voices*, a book of re-executable notebooks on
reasoning with many voices (panels of experts, persona heads, collaborating models).

Modules are flat and single-purpose; the README's Layout table maps them in the order data flows.
"""
__version__ = "0.1.0"
