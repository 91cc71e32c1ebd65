"""Native (C) kernels for the hot loops, built at first use; see build.py."""
