"""Pure Python/NumPy twins of the C++ components, written to be read.

Each module mirrors a C++ file of the same name (``gguf.py`` ↔ ``csrc/formats/gguf.cpp``) and gives
identical results on the same input; tests run both and compare.
"""
