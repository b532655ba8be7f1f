"""Models the compiler suite compiles."""
