"""Writes examples/poisson_groups.npz, the data of examples/poisson_groups.py: 60 counts in 3 groups.

    python examples/make_poisson_groups.py
"""

from pathlib import Path

import numpy as np

rng = np.random.default_rng(0)
group = np.repeat([0, 1, 2], 20)                      # integer group index per row
x = rng.normal(size=60)                               # a covariate (float)
y = rng.poisson(np.exp(np.array([0.5, 1.0, 1.5])[group] + 0.3 * x))   # counts (integer)
np.savez(Path(__file__).with_name("poisson_groups.npz"), y=y, group=group, x=x)
