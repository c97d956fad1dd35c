"""The scanner's native code, at the bottom of the house: C extensions built when the package installs (optional:
without a C compiler every caller runs its Python form, the reference) and :mod:`scanner.native.switch`, which says
whether they run. Nothing here imports from the rest of the scanner."""
