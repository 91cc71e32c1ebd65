"""Numerics shared by the method families: mode finding and Laplace, the Gaussian q, Pathfinder's path, progress bars."""
