"""Variational auto-encoders: models, training methods (VAE, HVI, RMHVI, DPP-VAE) and the k-DPP prior."""
