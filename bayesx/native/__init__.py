"""Native (C) kernels for the hot loops: one backend of bayesx.kernels (see bayesx.kernels.backend), built at
install time (``python -m bayesx.native.build``, which ``make install`` runs) or else at first use; see build.py."""
